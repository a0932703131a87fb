// NBD targets (dlfs/nbd.h): volumes read from nbdkit over a Unix socket and
// TCP on 127.0.0.1 are byte-identical to the local files, mixed local + NBD
// volumes read and verify, and faults (injected EIO, a killed, stalled or
// restarted server, a wrong or too small export, a wrong TLS key) end in
// errors naming the sample and the URI, in bounded time. Skipped, saying
// why, where nbdkit or libnbd is missing.
#include <signal.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "dlfs/builder.h"
#include "dlfs/io_engine.h"
#include "dlfs/loader.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "nbd_server.h"
#include "synthetic_volume.h"
#include "testutil.h"

namespace dlfs {
namespace nbd_test {

namespace fs = std::filesystem;
using testing::NbdServer;
using testing::StatusIs;
using testing::TempDir;

constexpr uint64_t kN = 300;

// Name i of the synthetic volume is "c<class>/<i>": the source index.
uint64_t SourceIndex(const Volume& v, uint64_t idx) {
  return std::stoull(std::string(v.directory().name(idx)));
}

class NbdTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string why = testing::NbdSkipReason();
    if (!why.empty()) GTEST_SKIP() << why;
    path_ = tmp_ / "v.dlfs";
    ASSERT_OK(testing::WriteSyntheticVolume(
        path_, {.samples = kN, .classes = 3, .volume = {.align = 1, .targets = 3}}));
  }

  std::string Target(uint32_t t) const { return VolumeBuilder::DefaultTargetPath(path_, t); }

  std::unique_ptr<NbdServer> Serve(const std::string& file, NbdServer::Options o = {}) {
    auto s = std::make_unique<NbdServer>(file, tmp_.path(), std::move(o));
    EXPECT_TRUE(s->Start()) << "nbdkit did not start serving " << file;
    return s;
  }

  static LoaderOptions Options(NbdOptions nbd = {}) {
    LoaderOptions o;
    o.sampler = {.seed = 5, .batch_size = 32};
    o.engine.queue_depth = 16;
    o.engine.nbd = nbd;
    o.cache_budget = 0;  // every read through the engine
    return o;
  }

  // Reads one epoch and checks every sample against its source bytes.
  void ReadEpochExactly(const std::shared_ptr<Volume>& v, const LoaderOptions& o) {
    auto l = Loader::Create(v, o);
    ASSERT_OK(l);
    EXPECT_NE((*l)->description().find("NBD"), std::string::npos) << (*l)->description();
    Batch batch;
    uint64_t seen = 0;
    while (true) {
      auto more = (*l)->Next(&batch);
      ASSERT_OK(more);
      if (!*more) break;
      for (size_t k = 0; k < batch.size(); ++k) {
        const std::vector<std::byte> want =
            testing::SyntheticBytes(SourceIndex(*v, batch.index(k)));
        const auto got = batch.sample(k);
        ASSERT_EQ(got.size(), want.size());
        ASSERT_TRUE(testing::SameBytes(got, want)) << batch.index(k);
        ++seen;
      }
    }
    EXPECT_EQ(seen, kN);
  }

  TempDir tmp_;
  std::string path_;
};

TEST_F(NbdTest, UriIsRecognised) {
  EXPECT_TRUE(IsNbdUri("nbd://host/x"));
  EXPECT_TRUE(IsNbdUri("nbd+unix:///x?socket=/s"));
  EXPECT_TRUE(IsNbdUri("nbds+unix:///?socket=/s"));
  EXPECT_FALSE(IsNbdUri("/data/v.dlfs"));
  EXPECT_FALSE(IsNbdUri("nbd.dlfs"));
  EXPECT_FALSE(IsNbdUri("http://x/y"));
}

// The engine alone: every byte of every target file, read through NBD over
// a Unix socket and over TCP, equals the file's.
TEST_F(NbdTest, EngineReadsAreByteIdenticalOverUnixAndTcp) {
  for (bool tcp : {false, true}) {
    for (uint32_t conns : {1u, 3u}) {
      auto server = Serve(Target(1), {.tcp = tcp});
      const std::vector<std::byte> file = testing::ReadFile(Target(1));
      auto engine = CreateEngine(
          {server->uri()}, {.queue_depth = 8, .nbd = {.connections = conns, .timeout_seconds = 5}});
      ASSERT_OK(engine);
      EXPECT_EQ((*engine)->kind(), EngineKind::kNbd);
      std::vector<std::byte> got(file.size());
      // Odd-sized, unaligned pieces, many at once.
      std::vector<ReadRequest> reqs;
      for (uint64_t at = 0; at < file.size();) {
        const uint64_t n = std::min<uint64_t>(file.size() - at, 1 + (at * 7919) % 20011);
        reqs.push_back({.target = 0, .offset = at, .length = n, .buffer = got.data() + at});
        at += n;
      }
      std::vector<Status> results(reqs.size());
      ASSERT_OK((*engine)->Read(reqs, results));
      for (const Status& st : results) ASSERT_OK(st);
      EXPECT_TRUE(got == file) << (tcp ? "tcp" : "unix") << ", " << conns << " connections";
      if (conns > 1) {
        EXPECT_NE((*engine)->description().find("3 connections"), std::string::npos)
            << (*engine)->description();
      }
    }
  }
}

// Target 0 itself served: the volume opens through its URI, the loader
// reads it, verify passes.
TEST_F(NbdTest, WholeVolumeOverNbdReadsAndVerifies) {
  ASSERT_OK(testing::WriteSyntheticVolume(tmp_ / "one.dlfs",
                                          {.samples = kN, .classes = 3, .volume = {.align = 1}}));
  auto server = Serve(tmp_ / "one.dlfs");
  auto v = Volume::Open(server->uri());
  ASSERT_OK(v);
  EXPECT_EQ((*v)->size(), kN);
  ReadEpochExactly(*v, Options());
  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
  EXPECT_EQ(report.samples_checked, kN);
  ASSERT_OK((*v)->CheckBackupSuperblock());
}

// Target 0 local, targets 1 and 2 on two servers (Unix socket and TCP).
TEST_F(NbdTest, MixedLocalAndTwoNbdTargetsReadAndVerify) {
  auto s1 = Serve(Target(1));
  auto s2 = Serve(Target(2), {.tcp = true});
  VolumeOpenOptions open;
  open.target_map = {{1, s1->uri()}, {2, s2->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  EXPECT_EQ((*v)->info().targets[1], s1->uri());
  EXPECT_EQ((*v)->info().target_details[0].kind, TargetKind::kFile);
  EXPECT_EQ((*v)->info().target_details[1].kind, TargetKind::kNbdExport);
  EXPECT_EQ((*v)->info().target_details[2].kind, TargetKind::kNbdExport);
  {
    // The local target's pread pool has its share of the queue depth:
    // ceil(64 / 3) threads for one target of three, not 64.
    EngineOptions eo;
    eo.queue_depth = 64;
    auto engine = CreateEngine((*v)->OpenTargetPaths(), eo);
    ASSERT_OK(engine);
    EXPECT_NE((*engine)->description().find("local targets: pread thread pool"), std::string::npos)
        << (*engine)->description();
    EXPECT_NE((*engine)->description().find(", 22 threads"), std::string::npos)
        << (*engine)->description();
  }
  ReadEpochExactly(*v, Options({.connections = 2}));
  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
  for (uint64_t i = 0; i < kN; i += 17) {
    auto bytes = (*v)->Read(i);
    ASSERT_OK(bytes);
    EXPECT_TRUE(*bytes == testing::SyntheticBytes(SourceIndex(**v, i)));
  }
}

// nbdkit's error filter answers reads with EIO once the trigger file
// exists: the epoch fails with errors naming samples and the URI.
TEST_F(NbdTest, ServerErrorsNameTheSampleAndTheUri) {
  const std::string trigger = tmp_ / "inject";
  auto s1 = Serve(Target(1), {.filters = {"error"},
                              .params = {"error-pread=EIO", "error-pread-rate=100%",
                                         "error-pread-file=" + trigger}});
  VolumeOpenOptions open;
  open.target_map = {{1, s1->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  std::ofstream(trigger).put('x');
  auto l = Loader::Create(*v, Options());
  ASSERT_OK(l);
  Batch batch;
  bool failed = false;
  while (true) {
    auto more = (*l)->Next(&batch);
    if (!more.ok()) {
      failed = true;
      const std::string m = more.status().message();
      EXPECT_NE(m.find(s1->uri()), std::string::npos) << m;
      EXPECT_NE(m.find("sample"), std::string::npos) << m;
      EXPECT_NE(m.find("Input/output error"), std::string::npos) << m;
      continue;
    }
    if (!*more) break;
  }
  EXPECT_TRUE(failed);
  // The simple path names them too.
  for (uint64_t i = 0; i < kN; ++i) {
    if ((*v)->directory().sample(i).target != 1 || (*v)->directory().sample(i).length == 0) {
      continue;
    }
    auto r = (*v)->Read(i);
    ASSERT_THAT(r, StatusIs(StatusCode::kIOError, s1->uri()));
    EXPECT_NE(r.status().message().find("sample " + std::to_string(i)), std::string::npos);
    break;
  }
}

// Runs one epoch to its end, returning the first error (OK if none) and
// how long it took.
std::pair<Status, double> DrainEpoch(Loader& l, const std::function<void(int)>& after_batch) {
  const double t0 = Now();
  Status first;
  Batch batch;
  for (int k = 0;; ++k) {
    auto more = l.Next(&batch);
    if (!more.ok()) {
      if (first.ok()) first = more.status();
      continue;
    }
    if (!*more) break;
    after_batch(k);
  }
  return {first, Now() - t0};
}

TEST_F(NbdTest, KilledServerEndsInACleanErrorWithinTheTimeout) {
  auto s1 = Serve(Target(1));
  VolumeOpenOptions open;
  open.target_map = {{1, s1->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  auto l = Loader::Create(
      *v, Options({.timeout_seconds = 2, .reconnects = 2, .reconnect_delay_seconds = 0.05}));
  ASSERT_OK(l);
  auto [st, seconds] = DrainEpoch(**l, [&](int k) {
    if (k == 1) s1->Kill();
  });
  ASSERT_THAT(st, StatusIs(StatusCode::kIOError, s1->uri()))
      << "no error after the server was killed";
  EXPECT_NE(st.message().find("sample"), std::string::npos) << st.message();
  EXPECT_LT(seconds, 2 * 3 + 2.0) << st.message();
}

TEST_F(NbdTest, StalledServerTimesOut) {
  auto s1 = Serve(Target(1));
  VolumeOpenOptions open;
  open.target_map = {{1, s1->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  const NbdOptions nbd{.timeout_seconds = 0.5, .reconnects = 1, .reconnect_delay_seconds = 0.05};
  auto l = Loader::Create(*v, Options(nbd));
  ASSERT_OK(l);
  auto [st, seconds] = DrainEpoch(**l, [&](int k) {
    if (k == 0) s1->Kill(SIGSTOP);
  });
  ASSERT_THAT(st, StatusIs(StatusCode::kIOError, "timed out"));
  EXPECT_NE(st.message().find(s1->uri()), std::string::npos) << st.message();
  // Each outage costs one read timeout and the reconnects' handshake
  // timeouts, then the target is left alone: bounded, not per sample.
  EXPECT_LT(seconds, 8.0);
  s1->Kill();
}

TEST_F(NbdTest, RestartedServerIsReconnected) {
  auto s1 = Serve(Target(1));
  VolumeOpenOptions open;
  open.target_map = {{1, s1->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  auto engine = CreateEngine((*v)->OpenTargetPaths(), {.queue_depth = 8,
                                                       .nbd = {.connections = 2,
                                                               .timeout_seconds = 5,
                                                               .reconnects = 20,
                                                               .reconnect_delay_seconds = 0.05}});
  ASSERT_OK(engine);
  const std::vector<std::byte> file = testing::ReadFile(Target(1));
  auto read_all = [&] {
    std::vector<std::byte> got(file.size());
    std::vector<ReadRequest> reqs;
    for (uint64_t at = 0; at < file.size(); at += 4096) {
      reqs.push_back({.target = 1,
                      .offset = at,
                      .length = std::min<uint64_t>(4096, file.size() - at),
                      .buffer = got.data() + at});
    }
    std::vector<Status> results(reqs.size());
    EXPECT_OK((*engine)->Read(reqs, results));
    for (const Status& st : results) EXPECT_OK(st);
    return got == file;
  };
  EXPECT_TRUE(read_all());
  s1->Kill();
  ASSERT_TRUE(s1->Start());  // same socket, same file
  EXPECT_TRUE(read_all());
  // Through the simple path too.
  for (uint64_t i = 0; i < kN; ++i) {
    if ((*v)->directory().sample(i).target == 1) {
      ASSERT_OK((*v)->Read(i));
    }
  }
}

TEST_F(NbdTest, WrongOrTooSmallExportIsRefusedNamingTheUri) {
  auto wrong = Serve(Target(2));  // target 2 offered as target 1
  VolumeOpenOptions open;
  open.target_map = {{1, wrong->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_THAT(v, StatusIs(StatusCode::kCorruption, wrong->uri()));

  // Another volume's target 1.
  ASSERT_OK(testing::WriteSyntheticVolume(
      tmp_ / "other.dlfs", {.samples = kN, .classes = 3, .volume = {.align = 1, .targets = 3}}));
  auto other = Serve(VolumeBuilder::DefaultTargetPath(tmp_ / "other.dlfs", 1));
  open.target_map = {{1, other->uri()}};
  v = Volume::Open(path_, open);
  ASSERT_THAT(v, StatusIs(StatusCode::kCorruption, "uuid"));
  EXPECT_NE(v.status().message().find(other->uri()), std::string::npos) << v.status().message();

  // A truncated copy of target 1.
  std::vector<std::byte> bytes = testing::ReadFile(Target(1));
  bytes.resize(bytes.size() / 2);
  const std::string small = tmp_ / "small";
  testing::WriteFile(small, bytes);
  auto short_server = Serve(small);
  open.target_map = {{1, short_server->uri()}};
  v = Volume::Open(path_, open);
  ASSERT_THAT(v, StatusIs(StatusCode::kCorruption, short_server->uri()));

  // Nobody listening.
  open.target_map = {{1, "nbd+unix:///?socket=" + tmp_ / "nobody.sock"}};
  v = Volume::Open(path_, open);
  ASSERT_THAT(v, StatusIs(StatusCode::kIOError, "nobody.sock"));
}

TEST_F(NbdTest, TlsPskWorksAndAWrongKeyIsRefused) {
  const std::string keys = tmp_ / "keys.psk", wrong = tmp_ / "wrong.psk";
  std::ofstream(keys) << "alice:5bc3b2ed4f0e3e1f9e0bd2a35e6b8f0c27c0b2a1d6f8e7c9a0b1c2d3e4f50617\n";
  std::ofstream(wrong)
      << "alice:00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff\n";
  ::chmod(keys.c_str(), 0600);
  ::chmod(wrong.c_str(), 0600);
  auto server = Serve(Target(1), {.tls_psk = keys});
  VolumeOpenOptions open;
  open.nbd.timeout_seconds = 5;
  open.target_map = {{1, server->uri("tls-psk-file=" + keys, "alice")}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  ReadEpochExactly(*v, Options());

  open.target_map = {{1, server->uri("tls-psk-file=" + wrong, "alice")}};
  auto refused = Volume::Open(path_, open);
  ASSERT_THAT(refused, StatusIs(StatusCode::kIOError, "target 1"));

  // Plain NBD to a TLS-only server is refused too.
  std::string uri = server->uri();
  uri.replace(0, 4, "nbd");  // nbds+unix -> nbd+unix
  open.target_map = {{1, uri}};
  EXPECT_THAT(Volume::Open(path_, open), StatusIs(StatusCode::kIOError, "target 1 (" + uri + ")"));
}

// Volume::Close closes the NBD connections; reads are then refused.
TEST_F(NbdTest, CloseRefusesLaterReads) {
  auto s1 = Serve(Target(1));
  VolumeOpenOptions open;
  open.target_map = {{1, s1->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  uint64_t on1 = 0;
  while ((*v)->directory().sample(on1).target != 1) ++on1;
  ASSERT_OK((*v)->Read(on1));
  (*v)->Close();
  auto r = (*v)->Read(on1);
  ASSERT_THAT(r, StatusIs(StatusCode::kInvalidArgument, "volume is closed"));
}

// An export larger than its target (a whole device) opens: the target is
// the first volume_size bytes, as its superblock says.
TEST_F(NbdTest, ExportLargerThanItsTargetOpens) {
  std::vector<std::byte> bytes = testing::ReadFile(Target(1));
  bytes.resize(bytes.size() + (1 << 20), std::byte{0x5a});
  testing::WriteFile(tmp_ / "device", bytes);
  auto server = Serve(tmp_ / "device");
  VolumeOpenOptions open;
  open.target_map = {{1, server->uri()}};
  auto v = Volume::Open(path_, open);
  ASSERT_OK(v);
  ASSERT_OK((*v)->CheckBackupSuperblock());
  ReadEpochExactly(*v, Options());
}

// Packing onto exports: targets 1 and 2 written through libnbd, recorded
// as URIs in target 0's table, read back exactly; an interrupted pack and
// a too small export leave no valid target.
TEST_F(NbdTest, PackWritesTargetsToExports) {
  const std::string d1 = tmp_ / "disk1", d2 = tmp_ / "disk2";
  for (const std::string& d : {d1, d2}) {
    testing::WriteFile(d, std::vector<std::byte>(4 << 20, std::byte{0x77}));
  }
  auto s1 = Serve(d1, {.read_only = false});
  auto s2 = Serve(d2, {.tcp = true, .read_only = false});
  const std::string out = tmp_ / "remote.dlfs";
  testing::SyntheticVolume spec{.samples = kN, .classes = 3};
  spec.volume = {.align = 1, .targets = 3, .target_paths = {s1->uri(), s2->uri()}};
  ASSERT_OK(testing::WriteSyntheticVolume(out, spec));
  auto v = Volume::Open(out);
  ASSERT_OK(v);
  EXPECT_EQ((*v)->info().target_details[1].stored_path, s1->uri());
  EXPECT_EQ((*v)->info().targets[2], s2->uri());
  ReadEpochExactly(*v, Options());
  VerifyReport report;
  ASSERT_OK(VerifyVolume(**v, {}, &report));
  EXPECT_EQ(report.bad_samples, 0u);
  ASSERT_OK((*v)->CheckBackupSuperblock());
  v->reset();

  // The exports now hold targets: a second pack is refused without force.
  auto again = VolumeBuilder::Create(tmp_ / "again.dlfs", spec.volume);
  ASSERT_THAT(again, StatusIs(StatusCode::kAlreadyExists, s1->uri()));

  // Interrupted (never finished) with force: the old targets are gone, no
  // new one is valid, so the old volume no longer opens.
  spec.volume.overwrite = true;
  {
    auto b = VolumeBuilder::Create(tmp_ / "again.dlfs", spec.volume);
    ASSERT_OK(b);
    ASSERT_OK((*b)->Add("a/x", testing::RandomBytes(100000, 1), 0));
  }
  auto old = Volume::Open(out);
  ASSERT_THAT(old, StatusIs(StatusCode::kCorruption, s1->uri()));

  // An export smaller than the target: refused naming the URI.
  testing::WriteFile(tmp_ / "tiny", std::vector<std::byte>(64 << 10));
  auto tiny = Serve(tmp_ / "tiny", {.read_only = false});
  spec.volume.target_paths = {tiny->uri(), s2->uri()};
  const Status st = testing::WriteSyntheticVolume(tmp_ / "small.dlfs", spec);
  ASSERT_THAT(st, StatusIs(StatusCode::kInvalidArgument,
                           tiny->uri() + ": export has 65536 bytes, "
                                         "fewer than the target written to it"));

  // A read-only export cannot be packed onto.
  auto ro = Serve(d1);
  spec.volume.target_paths = {ro->uri(), s2->uri()};
  const Status refused = testing::WriteSyntheticVolume(tmp_ / "ro.dlfs", spec);
  ASSERT_THAT(refused, StatusIs(StatusCode::kIOError, "read-only"));
}

}  // namespace nbd_test
}  // namespace dlfs
