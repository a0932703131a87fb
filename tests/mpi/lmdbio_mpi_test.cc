// LmdbioReader under MPI: run with `mpirun -np 4` (CTest does). Every rank
// runs every test; tests are collective, so a check that fails on one rank
// uses EXPECT (never an early return) to keep the ranks in step.
//
// The oracle is liblmdb: each rank walks the database with a cursor and keeps
// every value in key order, then checks that each mode hands it exactly the
// records Caffe's pattern assigns to it, byte for byte.
#include <fcntl.h>
#include <mpi.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "common/crc32c.h"
#include "dlfs/lmdb.h"
#include "dlfs/lmdbio.h"
#include "dlfs/mpi.h"
#include "lmdb_writer.h"
#include "lmdbio/run_plan.h"
#include "mpi/mpi_testutil.h"
#include "testutil.h"

namespace dlfs {
namespace {

using testing::Rank;
using testing::RankRange;
using testing::Ranks;
using testing::RanksPerNode;
using testing::SharedTempDir;
using testing::StatusIs;

using testing::LmdbWriter;
using testing::Range;

// Deterministic, distinct value bytes for record i.
std::string Value(uint64_t i, size_t n) {
  std::string s(n, '\0');
  for (size_t j = 0; j < n; ++j) s[j] = static_cast<char>((i * 131 + j * 7 + (j >> 8)) & 0xff);
  if (n >= 8) std::memcpy(s.data(), &i, 8);
  return s;
}

// Every value of the database at `dir`, in key order, via liblmdb.
std::vector<std::string> OracleValues(const std::string& dir) {
  std::vector<std::string> out;
  MDB_env* env = nullptr;
  mdb_env_create(&env);
  EXPECT_EQ(mdb_env_open(env, dir.c_str(), MDB_RDONLY | MDB_NOLOCK, 0), 0);
  MDB_txn* txn = nullptr;
  MDB_dbi dbi = 0;
  MDB_cursor* cur = nullptr;
  EXPECT_EQ(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), 0);
  EXPECT_EQ(mdb_dbi_open(txn, nullptr, 0, &dbi), 0);
  EXPECT_EQ(mdb_cursor_open(txn, dbi, &cur), 0);
  MDB_val k, v;
  for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
       rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT)) {
    out.emplace_back(static_cast<const char*>(v.mv_data), v.mv_size);
  }
  mdb_cursor_close(cur);
  mdb_txn_abort(txn);
  mdb_env_close(env);
  return out;
}

// Sets DLFS_RANKS_PER_NODE for the scope (0: unset).
class FakeNodes {
 public:
  explicit FakeNodes(int ranks_per_node) {
    if (ranks_per_node > 0) {
      ::setenv("DLFS_RANKS_PER_NODE", std::to_string(ranks_per_node).c_str(), 1);
    } else {
      ::unsetenv("DLFS_RANKS_PER_NODE");
    }
  }
  ~FakeNodes() { ::unsetenv("DLFS_RANKS_PER_NODE"); }
};

constexpr LmdbioMode kAllModes[] = {
    LmdbioMode::kBaseline,
    LmdbioMode::kLmm,
    LmdbioMode::kLmmDm,
    LmdbioMode::kLmmDio,
    LmdbioMode::kLmmDioProv,
    LmdbioMode::kLmmDioProvCoal,
    LmdbioMode::kLmmDioProvCoalStag,
};

// The databases every mode is checked on, written once by rank 0.
class LmdbioTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new SharedTempDir();
    if (Rank() == 0) {
      // Inline values (no overflow pages) and a three-level tree.
      Write("small", 6000, [](uint64_t i) { return Value(i, 24 + i % 90); });
      // CIFAR-like: one overflow page per value; 20% deleted and rewritten
      // so their values sit in reused free pages, out of key order.
      Write(
          "cifar", 4800, [](uint64_t i) { return Value(i, 3072 + 17); }, 0.2);
      // Mixed: inline values and multi-page overflow runs.
      Write("mixed", 640,
            [](uint64_t i) { return Value(i, i % 5 == 0 ? 20000 + i : 200 + i % 1500); });
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }
  static void TearDownTestSuite() {
    delete dir_;
    dir_ = nullptr;
  }

  static void Write(const std::string& name, uint64_t n,
                    const std::function<std::string(uint64_t)>& value, double rewrite = 0) {
    const std::string path = *dir_ / name;
    ::mkdir(path.c_str(), 0755);
    LmdbWriter w;
    w.Open(path);
    w.Put(Range(n), value);
    if (rewrite > 0) {
      std::vector<uint64_t> victims;
      for (uint64_t i = 0; i < n; i += static_cast<uint64_t>(1 / rewrite)) victims.push_back(i);
      w.Delete(victims);
      w.Put(victims, value, 500);
    }
    w.Close();
    ::unlink((path + "/lock.mdb").c_str());
  }

  static std::string Db(const std::string& name) { return *dir_ / name; }

  // Reads `iters` iterations and checks each record against the oracle.
  // Returns the CRC32C of everything this rank read, or 0 if Open failed.
  uint32_t ReadAndCheck(const std::string& db, const std::vector<std::string>& oracle,
                        LmdbioOptions options, uint64_t iters, std::vector<uint32_t>* hits) {
    auto reader = LmdbioReader::Open(MPI_COMM_WORLD, db, options);
    EXPECT_OK(reader) << LmdbioModeName(options.mode) << ": " << reader.status().ToString();
    if (!reader.ok()) return 0;  // every rank got the same status
    const uint64_t b = options.batch_size / Ranks();
    uint32_t digest = 0;
    uint64_t wrong = 0;
    for (uint64_t i = 0; i < iters; ++i) {
      const Status st = (*reader)->Next();
      EXPECT_OK(st);
      if (!st.ok()) return 0;
      EXPECT_EQ((*reader)->count(), b);
      for (uint32_t j = 0; j < (*reader)->count(); ++j) {
        const uint64_t expected = (i * options.batch_size + Rank() * b + j) % oracle.size();
        const auto bytes = (*reader)->record(j);
        const std::string_view got(reinterpret_cast<const char*>(bytes.data()), bytes.size());
        if ((*reader)->record_index(j) != expected || got != oracle[expected]) {
          if (wrong++ < 3) {
            ADD_FAILURE() << LmdbioModeName(options.mode) << " rank " << Rank() << " iteration "
                          << i << " record " << j << ": expected record " << expected
                          << ", got index " << (*reader)->record_index(j) << " with "
                          << bytes.size() << " bytes";
          }
        }
        if (hits) ++(*hits)[expected];
        digest = crc32c::Extend(digest, bytes.data(), bytes.size());
      }
    }
    EXPECT_EQ(wrong, 0u) << LmdbioModeName(options.mode);
    return digest;
  }

  static SharedTempDir* dir_;
};

SharedTempDir* LmdbioTest::dir_ = nullptr;

TEST(NodeTopology, FakeNodesSplitTheHost) {
  {
    FakeNodes fake(2);
    auto topo = NodeTopology::Create(MPI_COMM_WORLD);
    ASSERT_OK(topo);
    EXPECT_EQ(topo->node_count(), (Ranks() + 1) / 2);
    EXPECT_EQ(topo->node_index(), Rank() / 2);
    EXPECT_EQ(topo->local_rank(), Rank() % 2);
    EXPECT_EQ(topo->node_first_rank(), Rank() / 2 * 2);
    EXPECT_TRUE(topo->contiguous());
    EXPECT_EQ(topo->leaders() != MPI_COMM_NULL, Rank() % 2 == 0);
  }
  {
    FakeNodes none(0);
    auto topo = NodeTopology::Create(MPI_COMM_WORLD);
    ASSERT_OK(topo);
    EXPECT_EQ(topo->node_count(), 1);  // one host
    EXPECT_EQ(topo->local_size(), Ranks());
  }
  ::setenv("DLFS_RANKS_PER_NODE", "two", 1);
  auto bad = NodeTopology::Create(MPI_COMM_WORLD);
  ::unsetenv("DLFS_RANKS_PER_NODE");
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("DLFS_RANKS_PER_NODE"), std::string::npos);
}

// Ranks that see different node layouts (mpirun's -x reaches only the first
// app context) all fail, naming who saw what, instead of hanging in the
// node split.
TEST(NodeTopology, RanksThatDisagreeOnTheLayoutFailTogether) {
  ASSERT_GE(Ranks(), 2);
  const int half = Ranks() / 2;
  {
    RanksPerNode env(Rank() < half ? "1" : "");
    auto topo = NodeTopology::Create(MPI_COMM_WORLD);
    EXPECT_EQ(topo.status().code(), StatusCode::kInvalidArgument) << topo.status().ToString();
    const std::string m = topo.status().message();
    EXPECT_NE(m.find("ranks disagree on DLFS_RANKS_PER_NODE"), std::string::npos) << m;
    EXPECT_NE(m.find("1 on " + RankRange(0, half - 1)), std::string::npos) << m;
    EXPECT_NE(m.find("unset or 0 on " + RankRange(half, Ranks() - 1)), std::string::npos) << m;
  }
  {
    // A malformed value on one rank only: every rank fails.
    RanksPerNode env(Rank() == Ranks() - 1 ? "two" : "2");
    auto topo = NodeTopology::Create(MPI_COMM_WORLD);
    EXPECT_EQ(topo.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(
        topo.status().message().find("'two' (invalid) on " + RankRange(Ranks() - 1, Ranks() - 1)),
        std::string::npos)
        << topo.status().ToString();
  }
  {
    // "0" and unset mean the same layout.
    RanksPerNode env(Rank() == 0 ? "0" : "");
    EXPECT_OK(NodeTopology::Create(MPI_COMM_WORLD));
  }
}

// Every mode, on one node and on two fake nodes, with one and two readers per
// node, returns exactly the records of Caffe's pattern (and so of the
// baseline), byte for byte, including across the wrap at the end.
TEST_F(LmdbioTest, EveryModeReturnsTheBaselineRecords) {
  for (const char* name : {"small", "cifar", "mixed"}) {
    const auto oracle = OracleValues(Db(name));
    ASSERT_GT(oracle.size(), 0u);
    for (int fake : {0, 2}) {
      FakeNodes nodes(fake);
      // Batch 4 (one record per rank) only on "mixed", the database of the
      // fewest records: on the others it took 2,700 iterations per mode,
      // most of this program's 50 s under ASan; batch 64 walks the same
      // pages and wraps as well.
      const bool mixed = std::string_view(name) == "mixed";
      for (uint32_t batch : mixed ? std::vector<uint32_t>{4, 64} : std::vector<uint32_t>{64}) {
        // Enough iterations to wrap around the end of the database once.
        const uint64_t iters = oracle.size() / batch + 7;
        LmdbioOptions base;
        base.mode = LmdbioMode::kBaseline;
        base.batch_size = batch;
        const uint32_t baseline = ReadAndCheck(Db(name), oracle, base, iters, nullptr);
        for (LmdbioMode mode : kAllModes) {
          for (uint32_t readers : {1u, 2u}) {
            if (mode == LmdbioMode::kBaseline || (mode == LmdbioMode::kLmm && readers > 1))
              continue;
            LmdbioOptions o = base;
            o.mode = mode;
            o.readers_per_node = readers;
            o.coalesce_bytes = 64 * 1024;  // several iterations per read even when small
            SCOPED_TRACE(std::string(name) + " mode " + std::string(LmdbioModeName(mode)) +
                         " fake nodes " + std::to_string(fake) + " batch " + std::to_string(batch) +
                         " readers " + std::to_string(readers));
            EXPECT_EQ(ReadAndCheck(Db(name), oracle, o, iters, nullptr), baseline);
          }
        }
      }
    }
  }
}

// Explicit reads through io_uring with O_DIRECT give the same bytes.
TEST_F(LmdbioTest, DirectIoThroughUring) {
  const auto oracle = OracleValues(Db("mixed"));
  FakeNodes nodes(2);
  for (LmdbioMode mode : {LmdbioMode::kLmmDio, LmdbioMode::kLmmDioProvCoalStag}) {
    LmdbioOptions o;
    o.mode = mode;
    o.batch_size = 8;
    o.engine = EngineKind::kAuto;  // uring where available, else pread (said in description)
    o.direct_io = true;
    o.readers_per_node = 2;
    ReadAndCheck(Db("mixed"), oracle, o, oracle.size() / 8 + 3, nullptr);
  }
}

// Over one epoch (N a multiple of B), all ranks together read every record
// exactly once.
TEST_F(LmdbioTest, EachRecordOncePerEpoch) {
  const auto oracle = OracleValues(Db("cifar"));
  const uint32_t batch = 64;
  ASSERT_EQ(oracle.size() % batch, 0u);
  FakeNodes nodes(2);
  for (LmdbioMode mode : kAllModes) {
    LmdbioOptions o;
    o.mode = mode;
    o.batch_size = batch;
    o.readers_per_node = 2;
    std::vector<uint32_t> hits(oracle.size()), total(oracle.size());
    ReadAndCheck(Db("cifar"), oracle, o, oracle.size() / batch, &hits);
    MPI_Allreduce(hits.data(), total.data(), static_cast<int>(hits.size()), MPI_UINT32_T, MPI_SUM,
                  MPI_COMM_WORLD);
    uint64_t not_once = 0;
    for (uint32_t h : total) not_once += h != 1;
    EXPECT_EQ(not_once, 0u) << LmdbioModeName(mode);
  }
}

// With planned_iterations, lmm-dio walks only the records the run reads
// and coal cuts its last read short; every mode still returns the baseline's
// records, including when the run wraps around the end of the database,
// and no more iterations than planned.
TEST_F(LmdbioTest, PlannedIterationsReadTheSameRecords) {
  const auto oracle = OracleValues(Db("mixed"));
  FakeNodes nodes(2);
  for (uint64_t iters : {uint64_t{5}, oracle.size() / 16 + 3}) {
    for (LmdbioMode mode : kAllModes) {
      LmdbioOptions o;
      o.mode = mode;
      o.batch_size = 16;
      o.readers_per_node = 2;
      o.coalesce_bytes = 256 * 1024;
      o.planned_iterations = iters;
      SCOPED_TRACE(std::string(LmdbioModeName(mode)) + " " + std::to_string(iters) + " iterations");
      auto reader = LmdbioReader::Open(MPI_COMM_WORLD, Db("mixed"), o);
      ASSERT_OK(reader);
      std::vector<uint32_t> hits(oracle.size());
      for (uint64_t i = 0; i < iters; ++i) {
        ASSERT_OK((*reader)->Next());
        for (uint32_t j = 0; j < (*reader)->count(); ++j) {
          const uint64_t expected = (i * 16 + Rank() * (16 / Ranks()) + j) % oracle.size();
          const auto bytes = (*reader)->record(j);
          ASSERT_EQ((*reader)->record_index(j), expected);
          ASSERT_EQ(std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()),
                    oracle[expected]);
        }
      }
      // The baseline reads as it goes; the others planned their reads.
      if (mode != LmdbioMode::kBaseline) {
        EXPECT_EQ((*reader)->Next().code(), StatusCode::kInvalidArgument);
      }
    }
  }
}

// A node's readers split each step evenly, whatever the runs: each reads
// its page-aligned share, in reads of at most the given size, and together
// they cover every run exactly once.
TEST(RunPlan, ReaderSharesAreEvenAndCoverTheRuns) {
  using lmdbio::Extent;
  using lmdbio::Run;
  constexpr uint64_t kMiB = 1 << 20;
  // Five runs of 1.6 MB (16 ImageNet-like records each), far apart.
  std::vector<Extent> extents;
  for (uint64_t r = 0; r < 5; ++r) extents.push_back({r * 10 * kMiB + 16, 1'600'000});
  const std::vector<Run> runs = lmdbio::PlanRuns(extents, 100 * kMiB, 0);
  ASSERT_EQ(runs.size(), 5u);
  const uint64_t total = lmdbio::RunsEnd(runs, 0);
  for (uint32_t readers : {1u, 2u, 3u, 7u}) {
    std::vector<std::pair<uint64_t, uint64_t>> pieces;  // (window, length)
    uint64_t most = 0;
    for (uint32_t k = 0; k < readers; ++k) {
      uint64_t mine = 0;
      for (const Run& p : lmdbio::ReaderShare(runs, total, readers, k, kMiB)) {
        EXPECT_LE(p.length, kMiB);
        EXPECT_EQ(p.file % 4096, 0u);
        // The piece reads the file bytes that sit at its window offset.
        const Run* r = lmdbio::FindRun(runs, p.file);
        ASSERT_NE(r, nullptr);
        EXPECT_EQ(p.window - r->window, p.file - r->file);
        pieces.emplace_back(p.window, p.length);
        mine += p.length;
      }
      most = std::max(most, mine);
    }
    // No reader reads more than an even share, rounded up to a page.
    EXPECT_LE(most, (total + readers - 1) / readers + 4096) << readers << " readers";
    std::sort(pieces.begin(), pieces.end());
    uint64_t at = 0;
    for (const auto& [w, n] : pieces) {
      EXPECT_EQ(w, at);  // no gap, no overlap
      at = w + n;
    }
    EXPECT_EQ(at, total);
  }
}

TEST_F(LmdbioTest, BadOptionsAreRefusedOnEveryRank) {
  LmdbioOptions o;
  o.batch_size = static_cast<uint32_t>(Ranks()) + 1;  // not a multiple of the ranks
  auto r = LmdbioReader::Open(MPI_COMM_WORLD, Db("small"), o);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("multiple"), std::string::npos);
  o.batch_size = 8;
  for (LmdbioMode mode : kAllModes) {
    o.mode = mode;
    auto missing = LmdbioReader::Open(MPI_COMM_WORLD, Db("no-such-db"), o);
    EXPECT_THAT(missing, StatusIs(StatusCode::kNotFound, Db("no-such-db") + ": "))
        << LmdbioModeName(mode);
  }
  // Reads are planned for planned_iterations; asking for more is an error,
  // not bytes that were never read.
  o.mode = LmdbioMode::kLmmDioProvCoal;
  o.planned_iterations = 3;
  auto planned = LmdbioReader::Open(MPI_COMM_WORLD, Db("small"), o);
  ASSERT_OK(planned);
  for (int i = 0; i < 3; ++i) EXPECT_OK((*planned)->Next());
  EXPECT_EQ((*planned)->Next().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ParseLmdbioMode("lmm-dio-prov").value(), LmdbioMode::kLmmDioProv);
  EXPECT_THAT(ParseLmdbioMode("fast"),
              StatusIs(StatusCode::kInvalidArgument, "unknown LMDBIO mode 'fast'"));
}

// Ranks that disagree on the layout, the options or the database get the
// same error, naming the ranks, in every mode; none hangs. The database is
// compared by content, so a copy under another path is the same database.
TEST_F(LmdbioTest, RanksThatDisagreeFailTogether) {
  const int last = Ranks() - 1;
  LmdbioOptions o;
  o.batch_size = 8;
  o.readers_per_node = 2;
  for (LmdbioMode mode : kAllModes) {
    o.mode = mode;
    SCOPED_TRACE(std::string(LmdbioModeName(mode)));
    {
      RanksPerNode env(Rank() < 2 ? "1" : "");
      auto r = LmdbioReader::Open(MPI_COMM_WORLD, Db("small"), o);
      EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument) << r.status().ToString();
      EXPECT_NE(r.status().message().find("DLFS_RANKS_PER_NODE"), std::string::npos)
          << r.status().ToString();
    }
    // The last rank opens another database.
    auto other = LmdbioReader::Open(MPI_COMM_WORLD, Db(Rank() == last ? "mixed" : "small"), o);
    EXPECT_EQ(other.status().code(), StatusCode::kInvalidArgument) << other.status().ToString();
    EXPECT_NE(other.status().message().find("the database"), std::string::npos);
    EXPECT_NE(other.status().message().find(RankRange(last, last) + ")"), std::string::npos)
        << other.status().ToString();
  }
  LmdbioOptions mixed = o;
  mixed.mode = Rank() == last ? LmdbioMode::kLmm : LmdbioMode::kLmmDioProv;
  auto r = LmdbioReader::Open(MPI_COMM_WORLD, Db("small"), mixed);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(
      r.status().message().find("ranks disagree on mode (lmm-dio-prov on " +
                                RankRange(0, last - 1) + "; lmm on " + RankRange(last, last) + ")"),
      std::string::npos)
      << r.status().ToString();
  // A batch that is a bad multiple on one rank only: the disagreement, not
  // an early return on that rank.
  mixed = o;
  mixed.batch_size = Rank() == 0 ? 7 : 8;
  r = LmdbioReader::Open(MPI_COMM_WORLD, Db("small"), mixed);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("batch size (7 on rank 0; 8 on"), std::string::npos)
      << r.status().ToString();

  const std::string copy = *dir_ / "copy-of-small";
  if (Rank() == 0) {
    ::mkdir(copy.c_str(), 0755);
    std::filesystem::copy_file(Db("small") + "/data.mdb", copy + "/data.mdb");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const auto oracle = OracleValues(Db("small"));
  FakeNodes nodes(2);
  for (LmdbioMode mode : {LmdbioMode::kLmmDm, LmdbioMode::kLmmDioProvCoalStag}) {
    o.mode = mode;
    EXPECT_NE(ReadAndCheck(Rank() == last ? copy : Db("small"), oracle, o, 20, nullptr), 0u);
  }
}

// A damaged database is an error on every rank, never a hang or a crash: a
// truncated file at open, and a file that shrinks while the readers use it.
TEST_F(LmdbioTest, DamagedDatabaseIsAnErrorOnEveryRank) {
  const std::string copy = *dir_ / "truncated";
  if (Rank() == 0) {
    ::mkdir(copy.c_str(), 0755);
    std::filesystem::copy_file(Db("cifar") + "/data.mdb", copy + "/data.mdb");
    EXPECT_EQ(::truncate((copy + "/data.mdb").c_str(), 3 * 4096), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  LmdbioOptions o;
  o.batch_size = 8;
  for (LmdbioMode mode : {LmdbioMode::kLmmDioProv, LmdbioMode::kLmmDioProvCoalStag}) {
    o.mode = mode;
    auto r = LmdbioReader::Open(MPI_COMM_WORLD, copy, o);
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << r.status().ToString();
    EXPECT_NE(r.status().message().find("page"), std::string::npos) << r.status().ToString();
  }

  // A damaged overflow page header (here: it names another page) is caught
  // by the reader that reads it; the record map alone cannot see it.
  const std::string damaged = *dir_ / "damaged";
  if (Rank() == 0) {
    ::mkdir(damaged.c_str(), 0755);
    std::filesystem::copy_file(Db("cifar") + "/data.mdb", damaged + "/data.mdb");
    auto map = LmdbRecordMap::Build(damaged);
    EXPECT_TRUE(map.ok() && map->in_overflow(100));
    const uint64_t header = map->value_offset(100) - LmdbRecordMap::kOverflowHeader;
    const uint64_t wrong_pgno = 12345678;
    int fd = ::open((damaged + "/data.mdb").c_str(), O_WRONLY);
    EXPECT_EQ(::pwrite(fd, &wrong_pgno, 8, static_cast<off_t>(header)), 8);
    ::close(fd);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (LmdbioMode mode : {LmdbioMode::kLmmDioProv, LmdbioMode::kLmmDioProvCoalStag}) {
    o.mode = mode;
    auto reader = LmdbioReader::Open(MPI_COMM_WORLD, damaged, o);
    ASSERT_OK(reader);
    Status st;
    for (int i = 0; i < 100 && st.ok(); ++i) st = (*reader)->Next();
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << st.ToString();
    EXPECT_NE(st.message().find("expected an overflow page"), std::string::npos) << st.ToString();
  }

  // Open a good copy, then cut it short: the readers' explicit reads hit the
  // end of file, and every rank gets that error from Next().
  const std::string shrinking = *dir_ / "shrinking";
  if (Rank() == 0) {
    ::mkdir(shrinking.c_str(), 0755);
    std::filesystem::copy_file(Db("cifar") + "/data.mdb", shrinking + "/data.mdb");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  FakeNodes nodes(2);
  o.mode = LmdbioMode::kLmmDioProv;
  o.readers_per_node = 2;
  auto reader = LmdbioReader::Open(MPI_COMM_WORLD, shrinking, o);
  ASSERT_OK(reader);
  MPI_Barrier(MPI_COMM_WORLD);
  if (Rank() == 0) {
    EXPECT_EQ(::truncate((shrinking + "/data.mdb").c_str(), 8 * 4096), 0);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  Status st;
  for (int i = 0; i < 1000 && st.ok(); ++i) st = (*reader)->Next();
  EXPECT_THAT(st, StatusIs(StatusCode::kIOError, "data.mdb"));
  // The reader stays broken with the same error.
  EXPECT_EQ((*reader)->Next().code(), st.code());
}

}  // namespace
}  // namespace dlfs

int main(int argc, char** argv) { return dlfs::testing::RunMpiTests(argc, argv); }
