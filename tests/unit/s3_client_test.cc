// s3:// URLs, where the S3 settings come from, and how a volume's targets are
// named beside an S3 object: no server needed (tests/python/test_s3.py reads
// volumes from a real RADOS Gateway).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <map>
#include <optional>
#include <string>

#include "io/target.h"
#include "s3/s3_client.h"
#include "testutil.h"

namespace dlfs {
namespace {

TEST(S3Url, ParsesBucketAndKey) {
  auto u = s3::ParseUrl("s3://data/imagenet/train.dlfs");
  ASSERT_TRUE(u.ok()) << u.status().ToString();
  EXPECT_EQ(u->bucket, "data");
  EXPECT_EQ(u->key, "imagenet/train.dlfs");
  EXPECT_EQ(u->text, "s3://data/imagenet/train.dlfs");
  for (const char* bad : {"s3://", "s3://bucket", "s3://bucket/", "s3:///key", "/local/file"}) {
    auto r = s3::ParseUrl(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find(bad), std::string::npos) << r.status().ToString();
  }
  EXPECT_TRUE(IsS3Url("s3://b/k"));
  EXPECT_FALSE(IsS3Url("nbd://host/export"));
}

// Sets environment variables for one test and restores them after.
class ScopedEnv {
 public:
  void Set(const char* name, const std::string& value) {
    if (!saved_.contains(name)) {
      const char* old = ::getenv(name);
      saved_[name] = old == nullptr ? std::optional<std::string>() : std::string(old);
    }
    if (value.empty()) {
      ::unsetenv(name);
    } else {
      ::setenv(name, value.c_str(), 1);
    }
  }
  ~ScopedEnv() {
    for (const auto& [name, value] : saved_) {
      if (value) {
        ::setenv(name.c_str(), value->c_str(), 1);
      } else {
        ::unsetenv(name.c_str());
      }
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST(S3Config, EnvironmentFirstThenProfileFiles) {
  testing::TempDir dir;
  const std::string config = dir.path() + "/config";
  const std::string credentials = dir.path() + "/credentials";
  std::ofstream(config) << "[default]\nregion = eu-west-1\n\n[profile lab]\nregion = ceph\n"
                           "endpoint_url = http://rgw.lab:7480/\ns3 =\n  addressing_style = path\n";
  std::ofstream(credentials)
      << "[default]\naws_access_key_id = AKDEFAULT\n"
         "aws_secret_access_key = default-secret\n"
         "[lab]\naws_access_key_id = AKLAB\naws_secret_access_key = lab-secret\n"
         "aws_session_token = token\n";
  ScopedEnv env;
  for (const char* v :
       {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"}) {
    env.Set(v, "");
  }
  env.Set("AWS_CONFIG_FILE", config);
  env.Set("AWS_SHARED_CREDENTIALS_FILE", credentials);

  auto c = s3::LoadConfig();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->region, "eu-west-1");
  EXPECT_EQ(c->endpoint, "https://s3.eu-west-1.amazonaws.com");
  EXPECT_EQ(c->access_key, "AKDEFAULT");
  EXPECT_EQ(c->secret_key, "default-secret");

  env.Set("AWS_PROFILE", "lab");
  c = s3::LoadConfig();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->region, "ceph");
  EXPECT_EQ(c->endpoint, "http://rgw.lab:7480");  // the trailing '/' dropped
  EXPECT_EQ(c->access_key, "AKLAB");
  EXPECT_EQ(c->session_token, "token");
  EXPECT_NE(c->credentials_from.find("lab"), std::string::npos);

  // The variables win over the files.
  env.Set("AWS_ENDPOINT_URL", "http://127.0.0.1:9000");
  env.Set("AWS_REGION", "us-east-1");
  env.Set("AWS_ACCESS_KEY_ID", "AKENV");
  env.Set("AWS_SECRET_ACCESS_KEY", "env-secret");
  c = s3::LoadConfig();
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->endpoint, "http://127.0.0.1:9000");
  EXPECT_EQ(c->region, "us-east-1");
  EXPECT_EQ(c->access_key, "AKENV");
  EXPECT_EQ(c->session_token, "");  // not the profile's: credentials come from one place
  EXPECT_EQ(c->credentials_from, "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");

  env.Set("AWS_SECRET_ACCESS_KEY", "");
  c = s3::LoadConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("no secret key"), std::string::npos);
  env.Set("AWS_SECRET_ACCESS_KEY", "env-secret");
  env.Set("AWS_ENDPOINT_URL", "127.0.0.1:9000");
  c = s3::LoadConfig();
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not a URL"), std::string::npos);
}

TEST(S3Targets, NeighboursAreNamedBesideTheObject) {
  using io_internal::ResolveTargetPath;
  EXPECT_EQ(ResolveTargetPath("s3://b/d/v.dlfs", "v.dlfs.t1"), "s3://b/d/v.dlfs.t1");
  EXPECT_EQ(ResolveTargetPath("s3://b/v.dlfs", "sub/v.t2"), "s3://b/sub/v.t2");
  EXPECT_EQ(ResolveTargetPath("s3://b/v.dlfs", "s3://other/x"), "s3://other/x");
  EXPECT_EQ(ResolveTargetPath("s3://b/v.dlfs", "/abs/file"), "/abs/file");
  EXPECT_EQ(io_internal::TargetIdentity("s3://b/k"), "s3://b/k");
}

TEST(S3Targets, ANewObjectIsHeldUntilPublishedAndErrorsNameIt) {
  ScopedEnv env;
  env.Set("AWS_ENDPOINT_URL", "http://127.0.0.1:1");  // nobody listens there
  env.Set("AWS_ACCESS_KEY_ID", "AK");
  env.Set("AWS_SECRET_ACCESS_KEY", "secret");
  auto t = io_internal::OpenTarget("s3://b/new.dlfs", io_internal::TargetMode::kCreate,
                                   {.overwrite = true});
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  io_internal::Target& target = **t;
  EXPECT_EQ(target.kind(), TargetKind::kS3Object);
  const std::string data = "superblock and then some samples";
  ASSERT_TRUE(target.Write(data.data(), data.size(), 4096).ok());
  EXPECT_EQ(target.size(), 4096 + data.size());
  std::string back(data.size(), '\0');
  ASSERT_TRUE(target.Read(back.data(), back.size(), 4096, "t").ok());
  EXPECT_EQ(back, data);
  ASSERT_TRUE(target.Resize(8192, "the volume").ok());
  EXPECT_EQ(target.size(), 8192u);
  // Nothing reaches the server before Publish, which names the URL.
  const Status st = target.Publish();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("s3://b/new.dlfs: cannot connect to the S3 endpoint"),
            std::string::npos)
      << st.ToString();
}

}  // namespace
}  // namespace dlfs
