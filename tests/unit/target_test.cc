// io_internal::Target (src/io/target.h): one interface over files and NBD
// exports. A file target round-trips writes, sizes, syncs and publishes
// under its name (and only then); a missing path is named in the error;
// the naming rules keep URIs as given; an export (nbdkit, skipped where it
// is missing) reads, writes, fits and withdraws through the same calls.
#include "io/target.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "nbd_server.h"
#include "testutil.h"

namespace dlfs::io_internal {
namespace target_test {

namespace fs = std::filesystem;
using dlfs::testing::Bytes;
using dlfs::testing::RandomBytes;
using dlfs::testing::ReadFile;
using dlfs::testing::StatusIs;
using dlfs::testing::TempDir;
using dlfs::testing::WriteFile;

TEST(FileTargetTest, WritesSizesSyncsAndPublishesThenReadsBack) {
  TempDir tmp;
  const std::string path = tmp / "t.bin";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Target> created, OpenTarget(path, TargetMode::kCreate));
  EXPECT_EQ(created->name(), path);
  EXPECT_EQ(created->kind(), TargetKind::kFile);
  EXPECT_EQ(created->size(), 0u);
  // Written under a temporary name; nothing at the path until Publish.
  const std::string temp = created->location();
  EXPECT_TRUE(temp.starts_with(path + ".tmp.")) << temp;
  EXPECT_TRUE(fs::exists(temp));
  EXPECT_FALSE(fs::exists(path));

  const std::vector<std::byte> head = Bytes("head"), body = RandomBytes(10000, 7);
  ASSERT_OK(created->Write(body.data(), body.size(), 4096));
  ASSERT_OK(created->Write(head.data(), head.size(), 0));
  EXPECT_EQ(created->size(), 4096 + body.size());
  ASSERT_OK(created->Resize(16384, "the test"));
  EXPECT_EQ(created->size(), 16384u);
  ASSERT_OK(created->Sync());
  std::vector<std::byte> got(body.size());
  ASSERT_OK(created->Read(got.data(), got.size(), 4096, "created"));
  EXPECT_EQ(got, body);

  ASSERT_OK(created->Publish());
  ASSERT_OK(created->SyncPublished());
  EXPECT_EQ(created->location(), path);
  EXPECT_FALSE(fs::exists(temp));
  created.reset();  // published: stays
  ASSERT_EQ(fs::file_size(path), 16384u);

  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Target> read, OpenTarget(path, TargetMode::kRead));
  EXPECT_EQ(read->size(), 16384u);
  EXPECT_EQ(read->kind(), TargetKind::kFile);
  EXPECT_GE(read->fd(), 0);
  std::vector<std::byte> first(head.size());
  ASSERT_OK(read->Read(first.data(), first.size(), 0, "read"));
  EXPECT_EQ(first, head);
  ASSERT_OK(read->Read(got.data(), got.size(), 4096, "read"));
  EXPECT_EQ(got, body);
  read->FitTo(100);  // a file is exactly its target
  EXPECT_EQ(read->size(), 16384u);
  // Reads past the end fail naming what the caller said.
  EXPECT_THAT(read->Read(got.data(), got.size(), 16000, "the caller's name"),
              StatusIs(StatusCode::kIOError, "the caller's name"));

  // Close keeps the descriptor's number but reads nothing more.
  const int fd = read->fd();
  read->Close();
  read->Close();
  EXPECT_EQ(read->fd(), fd);
  EXPECT_THAT(read->Read(first.data(), first.size(), 0, "closed"),
              StatusIs(StatusCode::kIOError, "closed"));
}

TEST(FileTargetTest, AnUnpublishedTargetLeavesNothing) {
  TempDir tmp;
  const std::string path = tmp / "t.bin";
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Target> created, OpenTarget(path, TargetMode::kCreate));
  const std::string temp = created->location();
  const std::vector<std::byte> data = RandomBytes(5000, 1);
  ASSERT_OK(created->Write(data.data(), data.size(), 0));
  created.reset();
  EXPECT_FALSE(fs::exists(temp));
  EXPECT_FALSE(fs::exists(path));
}

TEST(FileTargetTest, PublishReplacesOnlyWhenAskedAndWithdrawRemoves) {
  TempDir tmp;
  const std::string path = tmp / "t.bin";
  WriteFile(path, Bytes("old"));
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Target> created, OpenTarget(path, TargetMode::kCreate));
  const Status refused = created->Publish();
  EXPECT_EQ(refused.code(), StatusCode::kAlreadyExists) << refused.ToString();
  EXPECT_NE(refused.message().find(path + ": already exists"), std::string::npos);
  EXPECT_EQ(ReadFile(path), Bytes("old"));

  ASSERT_OK_AND_ASSIGN(created, OpenTarget(path, TargetMode::kCreate, {.overwrite = true}));
  const std::vector<std::byte> data = Bytes("new");
  ASSERT_OK(created->Write(data.data(), data.size(), 0));
  ASSERT_OK(created->Publish());
  EXPECT_EQ(ReadFile(path), data);
  created->Withdraw(4096);
  EXPECT_FALSE(fs::exists(path));
}

TEST(FileTargetTest, AMissingPathIsNamedInTheError) {
  TempDir tmp;
  const std::string path = tmp / "missing.dlfs";
  EXPECT_THAT(OpenTarget(path, TargetMode::kRead), StatusIs(StatusCode::kNotFound, path));
  EXPECT_THAT(OpenTarget(path, TargetMode::kRead, {.what = "target 2 (" + path + ")"}),
              StatusIs(StatusCode::kNotFound, "target 2 (" + path + ")"));
  EXPECT_THAT(OpenTarget(tmp.path(), TargetMode::kRead),
              StatusIs(StatusCode::kInvalidArgument, "is a directory"));
  // Named as the caller named it, with the directory that is missing; the
  // temporary file's name would only confuse (issue 41).
  const Result<std::unique_ptr<Target>> created =
      OpenTarget(tmp / "no/such/dir/t.bin", TargetMode::kCreate);
  EXPECT_THAT(created, StatusIs(StatusCode::kNotFound,
                                tmp / "no/such/dir/t.bin: cannot create it: directory " +
                                    tmp / "no/such/dir does not exist"));
  EXPECT_EQ(created.status().message().find(".tmp."), std::string::npos);
}

TEST(TargetNameTest, PathsAreRelativeToTargetZeroAndUrisAreAsGiven) {
  EXPECT_EQ(ResolveTargetPath("/data/v.dlfs", "v.dlfs.t1"), "/data/v.dlfs.t1");
  EXPECT_EQ(ResolveTargetPath("v.dlfs", "v.dlfs.t1"), "v.dlfs.t1");
  EXPECT_EQ(ResolveTargetPath("/data/v.dlfs", "/other/t1"), "/other/t1");
  EXPECT_EQ(ResolveTargetPath("/data/v.dlfs", "nbd://host/x"), "nbd://host/x");
  EXPECT_EQ(ResolveTargetPath("nbd://host/v", "v.t1"), "v.t1");

  EXPECT_EQ(*StoredTargetPath("/data/v.dlfs", "/data/sub/t1", 240), "sub/t1");
  EXPECT_EQ(*StoredTargetPath("/data/v.dlfs", "/other/t1", 240), "/other/t1");
  EXPECT_EQ(*StoredTargetPath("/data/v.dlfs", "nbd://host/x", 240), "nbd://host/x");
  EXPECT_THAT(StoredTargetPath("/data/v.dlfs", "/data/./v.dlfs", 240),
              StatusIs(StatusCode::kInvalidArgument, "not usable as a target file"));
  EXPECT_THAT(StoredTargetPath("/data/v.dlfs", "nbd://host/" + std::string(300, 'x'), 240),
              StatusIs(StatusCode::kInvalidArgument, "URI longer than 240 bytes"));
  EXPECT_THAT(StoredTargetPath("/data/v.dlfs", "/elsewhere/" + std::string(250, 'y'), 240),
              StatusIs(StatusCode::kInvalidArgument, "place it nearer to /data/v.dlfs"));

  EXPECT_EQ(TargetIdentity("/data/a/../v.t1"), TargetIdentity("/data/v.t1"));
  EXPECT_EQ(TargetIdentity("nbd://host/x"), "nbd://host/x");
  EXPECT_TRUE(PublishedWhole("/data/v.dlfs"));
  EXPECT_FALSE(PublishedWhole("nbd+unix:///?socket=/s"));
  EXPECT_TRUE(PublishedWhole("s3://bucket/v.dlfs"));
  EXPECT_TRUE(RemoveStaleTemporaries("nbd://host/x").empty());
}

TEST(TargetNameTest, CheckNameFreeRefusesAnExistingFileUnlessOverwriting) {
  TempDir tmp;
  const std::string path = tmp / "v.dlfs";
  ASSERT_OK(CheckNameFree(path, false));
  WriteFile(path, Bytes("x"));
  const Status st = CheckNameFree(path, false);
  EXPECT_EQ(st.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(st.message(), path + ": already exists (set overwrite to replace it)");
  ASSERT_OK(CheckNameFree(path, true));
  ASSERT_OK(CheckNameFree("nbd://host/x", false));
}

class NbdTargetTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = dlfs::testing::NbdSkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
    disk_ = tmp_ / "disk";
    bytes_ = RandomBytes(64 << 10, 3);
    WriteFile(disk_, bytes_);
    server_ = std::make_unique<dlfs::testing::NbdServer>(
        disk_, tmp_.path(), dlfs::testing::NbdServer::Options{.read_only = false});
    ASSERT_TRUE(server_->Start()) << "nbdkit did not start";
  }

  TempDir tmp_;
  std::string disk_;
  std::vector<std::byte> bytes_;
  std::unique_ptr<dlfs::testing::NbdServer> server_;
};

TEST_F(NbdTargetTest, ReadsFitsAndCloses) {
  const std::string uri = server_->uri();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Target> t, OpenTarget(uri, TargetMode::kRead));
  EXPECT_EQ(t->name(), uri);
  EXPECT_EQ(t->kind(), TargetKind::kNbdExport);
  EXPECT_EQ(t->fd(), -1);
  EXPECT_EQ(t->size(), bytes_.size());
  std::vector<std::byte> got(bytes_.size());
  ASSERT_OK(t->Read(got.data(), got.size(), 0, "export"));
  EXPECT_EQ(got, bytes_);
  t->FitTo(8192);  // an export may hold a smaller target
  EXPECT_EQ(t->size(), 8192u);
  t->FitTo(1 << 30);
  EXPECT_EQ(t->size(), 8192u);
  t->Close();
  EXPECT_THAT(t->Read(got.data(), 16, 0, "closed"),
              StatusIs(StatusCode::kInvalidArgument, "connection closed"));
}

TEST_F(NbdTargetTest, WritesInPlaceChecksItsSizeAndWithdraws) {
  const std::string uri = server_->uri();
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<Target> t, OpenTarget(uri, TargetMode::kCreate));
  // Written in place: its old contents and size are there from the start.
  EXPECT_EQ(t->location(), uri);
  EXPECT_EQ(t->size(), bytes_.size());
  const std::vector<std::byte> data = RandomBytes(9000, 9);
  ASSERT_OK(t->Write(data.data(), data.size(), 4096));
  // Past the end: the size check, not libnbd's "request out of bounds".
  EXPECT_THAT(t->Write(data.data(), data.size(), bytes_.size() - 100),
              StatusIs(StatusCode::kInvalidArgument,
                       uri + ": export has " + std::to_string(bytes_.size()) +
                           " bytes, fewer than the target written to it (which reaches byte " +
                           std::to_string(bytes_.size() - 100 + data.size()) + " so far)"));
  ASSERT_OK(t->Resize(bytes_.size(), "target 1"));
  const Status small = t->Resize(bytes_.size() + 1, "target 1");
  EXPECT_EQ(small.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(small.message(), uri + ": export has " + std::to_string(bytes_.size()) +
                                 " bytes, target 1 needs " + std::to_string(bytes_.size() + 1));
  ASSERT_OK(t->Sync());
  ASSERT_OK(t->Publish());
  ASSERT_OK(t->SyncPublished());
  std::vector<std::byte> file = ReadFile(disk_);
  ASSERT_EQ(file.size(), bytes_.size());  // never resized
  EXPECT_TRUE(std::equal(data.begin(), data.end(), file.begin() + 4096));
  t->Withdraw(4096);
  file = ReadFile(disk_);
  EXPECT_TRUE(std::all_of(file.begin(), file.begin() + 4096,
                          [](std::byte b) { return b == std::byte{0}; }));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), file.begin() + 4096));
  t.reset();  // an export keeps what was written
  EXPECT_EQ(ReadFile(disk_), file);
}

TEST_F(NbdTargetTest, AnUnreachableExportIsNamedInTheError) {
  const std::string uri = "nbd+unix:///?socket=" + (tmp_ / "nobody.sock");
  auto r = OpenTarget(uri, TargetMode::kRead, {.timeout_seconds = 2, .what = "target 1 (x)"});
  ASSERT_THAT(r, StatusIs(StatusCode::kIOError, "nobody.sock"));
  EXPECT_TRUE(r.status().message().starts_with("target 1 (x): ")) << r.status().message();
}

}  // namespace target_test
}  // namespace dlfs::io_internal
