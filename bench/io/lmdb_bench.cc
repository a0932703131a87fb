// LMDB as a sample store (the Caffe/LMDBIO way), for comparison with dlfs:
// one key per sample (its path relative to the tree), the file's bytes as
// the value, read back with mdb_get in random order.
//
//   dlfs_lmdb_bench build TREE DB            pack every file under TREE into DB
//   dlfs_lmdb_bench read DB [--threads N] [--seed S] [--limit K] [--no-readahead]
//
// DB is one file (MDB_NOSUBDIR; LMDB adds DB-lock). `build` walks TREE,
// sorts the relative paths (LMDB's key order) and appends them in
// transactions of 1000 puts (MDB_WRITEMAP | MDB_NOSYNC, one mdb_env_sync at
// the end), and prints {entries, bytes, seconds, db_bytes}.
//
// `read` lists every key with a cursor (untimed, like the index a loader
// keeps in memory; it reads the B-tree's leaf pages but no values), shuffles
// them by --seed (the same Fisher-Yates as dlfs_file_reader), then N threads
// take keys from a shared atomic counter and mdb_get each in a read-only
// transaction (renewed every 256 gets, like one per batch), copying the
// value into a per-thread buffer as a loader would. It prints the JSON of
// dlfs_file_reader: {files, bytes, seconds, samples_per_s, mb_per_s,
// cpu_s_per_gb, ...}. LMDB's default read-ahead is kept unless
// --no-readahead (MDB_NORDAHEAD). Cold-cache runs are the caller's job.
#include <lmdb.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>

#include "bench_util.h"

namespace {

using dlfs_bench::CpuSeconds;
using dlfs_bench::Now;
using dlfs_bench::Shuffle;

constexpr char kProgram[] = "dlfs_lmdb_bench";

[[noreturn]] void Die(const std::string& msg) { dlfs_bench::Die(kProgram, msg); }

void Check(int rc, const char* what) {
  if (rc != MDB_SUCCESS) Die(std::string(what) + ": " + mdb_strerror(rc));
}

int Build(const std::string& tree, const std::string& db) {
  namespace fs = std::filesystem;
  std::vector<std::string> keys;
  uint64_t total = 0;
  std::error_code ec;
  for (fs::recursive_directory_iterator it(tree, ec), end; !ec && it != end; it.increment(ec)) {
    if (!it->is_regular_file(ec)) continue;
    keys.push_back(fs::relative(it->path(), tree).string());
    total += it->file_size(ec);
  }
  if (ec) Die(tree + ": " + ec.message());
  if (keys.empty()) Die(tree + ": no files");
  std::sort(keys.begin(), keys.end());  // byte order = LMDB's default key order

  fs::remove(db, ec);
  fs::remove(db + "-lock", ec);
  const double t0 = Now();
  MDB_env* env = nullptr;
  Check(mdb_env_create(&env), "mdb_env_create");
  // Values take whole overflow pages: allow a page per value and 25% on top.
  const uint64_t map = ((total + keys.size() * 8192) * 5 / 4 + (256 << 20)) / 4096 * 4096;
  Check(mdb_env_set_mapsize(env, map), "mdb_env_set_mapsize");
  Check(mdb_env_open(env, db.c_str(), MDB_NOSUBDIR | MDB_WRITEMAP | MDB_NOSYNC | MDB_NOMETASYNC,
                     0644),
        (db + ": mdb_env_open").c_str());
  MDB_dbi dbi;
  MDB_txn* txn = nullptr;
  std::vector<char> buf;
  uint64_t bytes = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (txn == nullptr) {
      Check(mdb_txn_begin(env, nullptr, 0, &txn), "mdb_txn_begin");
      Check(mdb_dbi_open(txn, nullptr, 0, &dbi), "mdb_dbi_open");
    }
    const std::string path = tree + "/" + keys[i];
    std::ifstream in(path, std::ios::binary);
    if (!in) Die(path + ": " + std::strerror(errno));
    buf.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    MDB_val k{keys[i].size(), keys[i].data()};
    MDB_val v{buf.size(), buf.data()};
    Check(mdb_put(txn, dbi, &k, &v, MDB_APPEND), ("mdb_put " + keys[i]).c_str());
    bytes += buf.size();
    if ((i + 1) % 1000 == 0 || i + 1 == keys.size()) {
      Check(mdb_txn_commit(txn), "mdb_txn_commit");
      txn = nullptr;
    }
  }
  Check(mdb_env_sync(env, 1), "mdb_env_sync");
  mdb_env_close(env);
  const double secs = Now() - t0;
  struct stat st {};
  ::stat(db.c_str(), &st);
  std::printf("{\"entries\": %zu, \"bytes\": %llu, \"seconds\": %.3f, \"db_bytes\": %lld}\n",
              keys.size(), static_cast<unsigned long long>(bytes), secs,
              static_cast<long long>(st.st_blocks) * 512);
  return 0;
}

int Read(const std::string& db, uint64_t threads, uint64_t seed, uint64_t limit,
         bool no_readahead) {
  MDB_env* env = nullptr;
  Check(mdb_env_create(&env), "mdb_env_create");
  Check(mdb_env_set_maxreaders(env, static_cast<unsigned>(threads + 8)), "mdb_env_set_maxreaders");
  unsigned flags = MDB_NOSUBDIR | MDB_RDONLY | MDB_NOLOCK;
  if (no_readahead) flags |= MDB_NORDAHEAD;
  Check(mdb_env_open(env, db.c_str(), flags, 0644), (db + ": mdb_env_open").c_str());

  const double l0 = Now();
  std::vector<std::string> keys;
  MDB_dbi dbi;
  {
    MDB_txn* txn = nullptr;
    Check(mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn), "mdb_txn_begin");
    Check(mdb_dbi_open(txn, nullptr, 0, &dbi), "mdb_dbi_open");
    MDB_cursor* cur = nullptr;
    Check(mdb_cursor_open(txn, dbi, &cur), "mdb_cursor_open");
    MDB_val k, v;
    int rc;
    while ((rc = mdb_cursor_get(cur, &k, &v, keys.empty() ? MDB_FIRST : MDB_NEXT)) == 0) {
      keys.emplace_back(static_cast<const char*>(k.mv_data), k.mv_size);
    }
    if (rc != MDB_NOTFOUND) Check(rc, "mdb_cursor_get");
    mdb_cursor_close(cur);
    mdb_txn_abort(txn);
  }
  if (keys.empty()) Die(db + ": empty");
  Shuffle(&keys, seed);
  if (limit > 0 && limit < keys.size()) keys.resize(limit);
  const double list_seconds = Now() - l0;

  std::atomic<uint64_t> next{0};
  std::vector<uint64_t> files(threads), bytes(threads);
  std::vector<std::string> errors(threads);
  const double cpu0 = CpuSeconds();
  const double t0 = Now();
  {
    std::vector<std::thread> pool;
    for (uint64_t t = 0; t < threads; ++t) {
      pool.emplace_back([&, t] {
        std::vector<char> buf(1 << 20);
        MDB_txn* txn = nullptr;
        int rc = mdb_txn_begin(env, nullptr, MDB_RDONLY, &txn);
        uint64_t in_txn = 0;
        while (rc == MDB_SUCCESS) {
          const uint64_t i = next.fetch_add(1, std::memory_order_relaxed);
          if (i >= keys.size()) break;
          if (in_txn == 256) {  // one read transaction per "batch"
            mdb_txn_reset(txn);
            rc = mdb_txn_renew(txn);
            if (rc != MDB_SUCCESS) break;
            in_txn = 0;
          }
          MDB_val k{keys[i].size(), keys[i].data()};
          MDB_val v;
          rc = mdb_get(txn, dbi, &k, &v);
          if (rc != MDB_SUCCESS) {
            errors[t] = "mdb_get " + keys[i] + ": " + mdb_strerror(rc);
            break;
          }
          if (buf.size() < v.mv_size) buf.resize(v.mv_size);
          std::memcpy(buf.data(), v.mv_data, v.mv_size);  // touch every byte, as a loader would
          ++in_txn;
          ++files[t];
          bytes[t] += v.mv_size;
        }
        if (rc != MDB_SUCCESS && errors[t].empty()) errors[t] = mdb_strerror(rc);
        if (txn) mdb_txn_abort(txn);
      });
    }
    for (auto& th : pool) th.join();
  }
  const double secs = Now() - t0;
  const double cpu = CpuSeconds() - cpu0;
  uint64_t nfiles = 0, nbytes = 0;
  for (uint64_t t = 0; t < threads; ++t) {
    if (!errors[t].empty()) Die(db + ": " + errors[t]);
    nfiles += files[t];
    nbytes += bytes[t];
  }
  mdb_env_close(env);
  std::printf(
      "{\"files\": %llu, \"bytes\": %llu, \"seconds\": %.6f, \"samples_per_s\": %.1f, "
      "\"mb_per_s\": %.2f, \"cpu_seconds\": %.4f, \"cpu_s_per_gb\": %.4f, \"threads\": %llu, "
      "\"seed\": %llu, \"list_seconds\": %.4f, \"readahead\": %s}\n",
      static_cast<unsigned long long>(nfiles), static_cast<unsigned long long>(nbytes), secs,
      secs > 0 ? nfiles / secs : 0.0, secs > 0 ? nbytes / secs / 1e6 : 0.0, cpu,
      nbytes ? cpu / (nbytes / 1e9) : 0.0, static_cast<unsigned long long>(threads),
      static_cast<unsigned long long>(seed), list_seconds, no_readahead ? "false" : "true");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "LMDB as a sample store (one key per file, mdb_get in random order), the peer "
      "dlfs bench is compared with.",
      kProgram};
  app.require_subcommand(1);
  std::string tree, db;
  CLI::App* build = app.add_subcommand("build", "pack every file under TREE into the LMDB file DB");
  build->add_option("TREE", tree, "directory of sample files")->required();
  build->add_option("DB", db, "LMDB file to create (MDB_NOSUBDIR)")->required();
  uint64_t threads = 2, seed = 0, limit = 0;
  bool no_readahead = false;
  CLI::App* read = app.add_subcommand(
      "read", "mdb_get every key in a seeded random order; prints dlfs_file_reader's JSON");
  read->add_option("DB", db, "LMDB file made by build")->required();
  read->add_option("--threads", threads, "reader threads")->check(CLI::Range(1, 1000));
  read->add_option("--seed", seed, "seed of the shuffled order");
  read->add_option("--limit", limit, "read only the first K keys of the order (0: all)");
  read->add_flag("--no-readahead", no_readahead, "open with MDB_NORDAHEAD");
  CLI11_PARSE(app, argc, argv);
  if (*build) return Build(tree, db);
  return Read(db, threads, seed, limit, no_readahead);
}
