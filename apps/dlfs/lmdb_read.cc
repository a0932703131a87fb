// `dlfs lmdb read`: runs the LMDBIO reader under mpirun and reports, from
// rank 0, what every rank read and where the time went.
#include <fcntl.h>
#include <mpi.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "common/clock.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/lmdb.h"
#include "dlfs/lmdbio.h"
#include "dlfs/mpi.h"

namespace dlfs::cli {

namespace {

using json = nlohmann::json;

double Seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

// What one rank reports to rank 0, as doubles for a single MPI_Gather.
enum Field {
  kRecords,
  kBytes,
  kDigest,
  kIo,
  kCopy,
  kWait,
  kSkip,
  kSetup,
  kReadBytes,
  kReadCalls,
  kSkipped,
  kPrefetch,
  kUser,
  kSys,
  kVoluntary,
  kInvoluntary,
  kMismatches,
  kFieldCount
};

// Everything between MPI_Init and MPI_Finalize; returns the exit code.
int Run(const LmdbReadArgs& args, int rank, int ranks) {
  auto fail = [&](const Status& st) {
    if (rank == 0) std::fprintf(stderr, "dlfs: %s\n", st.message().c_str());
    return kExitError;
  };
  auto mode = ParseLmdbioMode(args.mode);
  if (!mode.ok()) return fail(mode.status());
  auto engine = ParseEngineKind(args.engine);
  if (!engine.ok()) return fail(engine.status());
  LmdbioOptions options;
  options.mode = *mode;
  options.batch_size = args.batch;
  options.readers_per_node = args.readers_per_node;
  options.prefetch = !args.no_prefetch;
  options.engine = *engine;
  options.direct_io = args.direct;
  options.coalesce_bytes = args.coalesce_bytes;
  options.max_coalesce_iters = args.max_coalesce_iters;
  options.stagger_group = args.stagger;
  options.planned_iterations = args.iters;

  if (args.drop_cache) {
    if (rank == 0 && !DropPageCache()) {
      std::fprintf(stderr, "dlfs: warning: could not drop the page cache (needs root)\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  // The oracle for --check: the parser's record map and plain preads.
  std::unique_ptr<LmdbRecordMap> oracle;
  ScopedFd oracle_fd;
  if (args.check) {
    auto map = LmdbRecordMap::Build(args.db);
    Status st = map.ok() ? Status::Ok() : map.status();
    if (st.ok()) {
      oracle = std::make_unique<LmdbRecordMap>(std::move(*map));
      oracle_fd = ScopedFd(::open(oracle->path().c_str(), O_RDONLY | O_CLOEXEC));
      if (oracle_fd.get() < 0) st = Status::FromErrno(errno, oracle->path());
    }
    // Every rank stops, or none does (the reader's open is collective).
    st = AgreeOnStatus(MPI_COMM_WORLD, st);
    if (!st.ok()) return fail(st);
  }

  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  auto opened = LmdbioReader::Open(MPI_COMM_WORLD, args.db, options);
  if (!opened.ok()) return fail(opened.status());
  LmdbioReader& reader = **opened;

  std::vector<uint32_t> hits(args.check ? reader.entries() : 0);
  uint32_t digest = 0;
  uint64_t mismatches = 0;
  std::string first_mismatch;
  std::vector<std::byte> expected;
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = Now();
  for (uint64_t i = 0; i < args.iters; ++i) {
    Status st = reader.Next();
    if (!st.ok()) return fail(st);
    for (uint32_t j = 0; j < reader.count(); ++j) {
      const auto bytes = reader.record(j);
      digest = crc32c::Extend(digest, bytes.data(), bytes.size());
      if (!args.check) continue;
      const uint64_t index = reader.record_index(j);
      ++hits[index];
      expected.resize(oracle->value_length(index));
      // A failed oracle read counts as a mismatch: returning early here
      // would leave the other ranks waiting in Next().
      Status rd = PreadFull(oracle_fd.get(), expected.data(), expected.size(),
                            oracle->value_offset(index), oracle->path());
      if (!rd.ok() || bytes.size() != expected.size() ||
          !std::equal(bytes.begin(), bytes.end(), expected.begin())) {
        if (mismatches++ == 0) {
          first_mismatch = "rank " + std::to_string(rank) + " iteration " + std::to_string(i) +
                           " record " + std::to_string(j) + " (key " +
                           std::string(oracle->key(index)) + ")" +
                           (rd.ok() ? "" : ": " + rd.message());
        }
      }
    }
  }
  MPI_Barrier(MPI_COMM_WORLD);
  const double wall = Now() - start;
  getrusage(RUSAGE_SELF, &after);

  const LmdbioTimes& t = reader.times();
  const LmdbioCounters& c = reader.counters();
  double mine[kFieldCount] = {};
  mine[kRecords] = static_cast<double>(c.records);
  mine[kBytes] = static_cast<double>(c.record_bytes);
  mine[kDigest] = digest;
  mine[kIo] = t.io;
  mine[kCopy] = t.copy;
  mine[kWait] = t.wait;
  mine[kSkip] = t.skip;
  mine[kSetup] = t.setup;
  mine[kReadBytes] = static_cast<double>(c.read_bytes);
  mine[kReadCalls] = static_cast<double>(c.read_calls);
  mine[kSkipped] = static_cast<double>(c.skipped);
  mine[kPrefetch] = static_cast<double>(c.prefetch_bytes);
  mine[kUser] = Seconds(after.ru_utime) - Seconds(before.ru_utime);
  mine[kSys] = Seconds(after.ru_stime) - Seconds(before.ru_stime);
  mine[kVoluntary] = static_cast<double>(after.ru_nvcsw - before.ru_nvcsw);
  mine[kInvoluntary] = static_cast<double>(after.ru_nivcsw - before.ru_nivcsw);
  mine[kMismatches] = static_cast<double>(mismatches);
  std::vector<double> all(rank == 0 ? size_t{kFieldCount} * ranks : 0);
  MPI_Gather(mine, kFieldCount, MPI_DOUBLE, all.data(), kFieldCount, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  std::vector<uint32_t> total_hits(rank == 0 ? hits.size() : 0);
  if (args.check) {
    MPI_Reduce(hits.data(), total_hits.data(), static_cast<int>(hits.size()), MPI_UINT32_T, MPI_SUM,
               0, MPI_COMM_WORLD);
  }
  // Say where the first mismatch was, wherever it happened.
  if (mismatches > 0 && rank != 0) {
    std::fprintf(stderr, "dlfs: mismatch at %s\n", first_mismatch.c_str());
  }
  if (rank != 0) return mismatches > 0 ? kExitDamaged : kExitOk;

  // Rank 0 reports.
  uint32_t job_digest = 0;
  double sum[kFieldCount] = {}, max[kFieldCount] = {};
  json per_rank = json::array();
  for (int r = 0; r < ranks; ++r) {
    const double* f = &all[size_t{kFieldCount} * r];
    const auto d = static_cast<uint32_t>(f[kDigest]);
    job_digest = crc32c::Extend(job_digest, &d, sizeof d);
    for (int k = 0; k < kFieldCount; ++k) {
      sum[k] += f[k];
      max[k] = std::max(max[k], f[k]);
    }
    per_rank.push_back({{"rank", r},
                        {"records", static_cast<uint64_t>(f[kRecords])},
                        {"bytes", static_cast<uint64_t>(f[kBytes])},
                        {"digest", d},
                        {"io_s", f[kIo]},
                        {"copy_s", f[kCopy]},
                        {"wait_s", f[kWait]},
                        {"skip_s", f[kSkip]},
                        {"setup_s", f[kSetup]},
                        {"read_bytes", static_cast<uint64_t>(f[kReadBytes])},
                        {"read_calls", static_cast<uint64_t>(f[kReadCalls])},
                        {"skipped", static_cast<uint64_t>(f[kSkipped])},
                        {"prefetch_bytes", static_cast<uint64_t>(f[kPrefetch])},
                        {"user_s", f[kUser]},
                        {"sys_s", f[kSys]},
                        {"voluntary_switches", static_cast<uint64_t>(f[kVoluntary])},
                        {"involuntary_switches", static_cast<uint64_t>(f[kInvoluntary])}});
  }
  json j = {{"db", args.db},
            {"mode", std::string(LmdbioModeName(*mode))},
            {"description", reader.description()},
            {"ranks", ranks},
            {"batch", args.batch},
            {"iters", args.iters},
            {"entries", reader.entries()},
            {"wall_s", wall},
            {"ms_per_iter", args.iters ? wall * 1e3 / args.iters : 0.0},
            {"setup_s_max", max[kSetup]},
            {"digest", job_digest},
            {"user_s", sum[kUser]},
            {"sys_s", sum[kSys]},
            {"voluntary_switches", static_cast<uint64_t>(sum[kVoluntary])},
            {"involuntary_switches", static_cast<uint64_t>(sum[kInvoluntary])},
            {"read_bytes", static_cast<uint64_t>(sum[kReadBytes])},
            {"record_bytes", static_cast<uint64_t>(sum[kBytes])},
            {"per_rank", per_rank}};
  uint64_t total_mismatches = static_cast<uint64_t>(sum[kMismatches]);
  if (args.check) {
    const auto [lo, hi] = std::minmax_element(total_hits.begin(), total_hits.end());
    j["check"] = {{"mismatches", total_mismatches},
                  {"min_reads_per_record", total_hits.empty() ? 0u : *lo},
                  {"max_reads_per_record", total_hits.empty() ? 0u : *hi}};
  }
  if (args.json) {
    std::cout << j.dump(2) << '\n';
  } else {
    std::printf("lmdb read    %s\n", args.db.c_str());
    std::printf("mode         %s\n", reader.description().c_str());
    std::printf("job          %d ranks, batch %u, %llu iterations, %llu records in the database\n",
                ranks, args.batch, static_cast<unsigned long long>(args.iters),
                static_cast<unsigned long long>(reader.entries()));
    std::printf("%4s %9s %12s %10s %8s %8s %8s %8s %10s\n", "rank", "records", "bytes", "digest",
                "io s", "copy s", "wait s", "skip s", "skipped");
    for (const json& r : per_rank) {
      std::printf("%4d %9llu %12llu %10s %8.3f %8.3f %8.3f %8.3f %10llu\n", r["rank"].get<int>(),
                  static_cast<unsigned long long>(r["records"].get<uint64_t>()),
                  static_cast<unsigned long long>(r["bytes"].get<uint64_t>()),
                  ("0x" +
                   [&] {
                     char b[16];
                     std::snprintf(b, sizeof b, "%08x", r["digest"].get<uint32_t>());
                     return std::string(b);
                   }())
                      .c_str(),
                  r["io_s"].get<double>(), r["copy_s"].get<double>(), r["wait_s"].get<double>(),
                  r["skip_s"].get<double>(),
                  static_cast<unsigned long long>(r["skipped"].get<uint64_t>()));
    }
    std::printf("digest       0x%08x (all ranks; equal across modes for the same job)\n",
                job_digest);
    std::printf("time         %.3f s, %.3f ms/iteration; open %.3f s (slowest rank)\n", wall,
                wall * 1e3 / std::max<uint64_t>(args.iters, 1), max[kSetup]);
    std::printf(
        "cpu          %.3f s user, %.3f s sys; context switches %llu voluntary, %llu "
        "involuntary (all ranks)\n",
        sum[kUser], sum[kSys], static_cast<unsigned long long>(sum[kVoluntary]),
        static_cast<unsigned long long>(sum[kInvoluntary]));
    std::printf("bytes        %s read for %s of records\n",
                std::to_string(static_cast<uint64_t>(sum[kReadBytes])).c_str(),
                std::to_string(static_cast<uint64_t>(sum[kBytes])).c_str());
    if (args.check) {
      std::printf("check        %llu mismatches; each record read %u to %u times\n",
                  static_cast<unsigned long long>(total_mismatches),
                  j["check"]["min_reads_per_record"].get<uint32_t>(),
                  j["check"]["max_reads_per_record"].get<uint32_t>());
    }
  }
  if (total_mismatches > 0) {
    std::fprintf(stderr, "dlfs: %llu records differ from the database (first: %s)\n",
                 static_cast<unsigned long long>(total_mismatches),
                 first_mismatch.empty() ? "on another rank" : first_mismatch.c_str());
    return kExitDamaged;
  }
  return kExitOk;
}

}  // namespace

int RunLmdbRead(const LmdbReadArgs& args) {
  // The reader is destroyed inside Run, before MPI_Finalize.
  return RunWithMpi([&](int rank, int world) { return Run(args, rank, world); });
}

}  // namespace dlfs::cli
