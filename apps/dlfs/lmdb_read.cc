// `dlfs lmdb read`: runs RunLmdbRead (dlfs/lmdb_read.h) under mpirun and
// prints rank 0's report.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

#include "commands.h"
#include "dlfs/lmdb_read.h"

namespace dlfs::cli {

namespace {

using json = nlohmann::json;

json RankJson(int rank, const LmdbReadRankResult& r) {
  return {{"rank", rank},
          {"records", r.counters.records},
          {"bytes", r.counters.record_bytes},
          {"digest", r.digest},
          {"io_s", r.times.io},
          {"copy_s", r.times.copy},
          {"wait_s", r.times.wait},
          {"skip_s", r.times.skip},
          {"setup_s", r.times.setup},
          {"read_bytes", r.counters.read_bytes},
          {"read_calls", r.counters.read_calls},
          {"skipped", r.counters.skipped},
          {"prefetch_bytes", r.counters.prefetch_bytes},
          {"user_s", r.user_s},
          {"sys_s", r.sys_s},
          {"voluntary_switches", r.voluntary_switches},
          {"involuntary_switches", r.involuntary_switches}};
}

json ReportJson(const LmdbReadArgs& args, const LmdbReadReport& report) {
  const LmdbReadOptions& options = args.options;
  const LmdbReadRankResult& sum = report.total;
  json per_rank = json::array();
  for (size_t r = 0; r < report.per_rank.size(); ++r) {
    per_rank.push_back(RankJson(static_cast<int>(r), report.per_rank[r]));
  }
  json j = {{"db", args.db},
            {"mode", std::string(LmdbioModeName(options.reader.mode))},
            {"description", report.description},
            {"ranks", report.ranks},
            {"batch", options.reader.batch_size},
            {"iters", options.iterations},
            {"entries", report.entries},
            {"wall_s", report.wall_s},
            {"ms_per_iter", options.iterations ? report.wall_s * 1e3 / options.iterations : 0.0},
            {"setup_s_max", report.setup_s_max},
            {"digest", report.digest},
            {"user_s", sum.user_s},
            {"sys_s", sum.sys_s},
            {"voluntary_switches", sum.voluntary_switches},
            {"involuntary_switches", sum.involuntary_switches},
            {"read_bytes", sum.counters.read_bytes},
            {"record_bytes", sum.counters.record_bytes},
            {"per_rank", per_rank}};
  if (report.check) {
    j["check"] = {{"mismatches", report.check->mismatches},
                  {"min_reads_per_record", report.check->min_reads_per_record},
                  {"max_reads_per_record", report.check->max_reads_per_record}};
  }
  return j;
}

void PrintText(const LmdbReadArgs& args, const LmdbReadReport& report) {
  const LmdbReadRankResult& sum = report.total;
  std::printf("lmdb read    %s\n", args.db.c_str());
  std::printf("mode         %s\n", report.description.c_str());
  std::printf("job          %d ranks, batch %u, %llu iterations, %llu records in the database\n",
              report.ranks, args.options.reader.batch_size,
              static_cast<unsigned long long>(args.options.iterations),
              static_cast<unsigned long long>(report.entries));
  std::printf("%4s %9s %12s %10s %8s %8s %8s %8s %10s\n", "rank", "records", "bytes", "digest",
              "io s", "copy s", "wait s", "skip s", "skipped");
  for (size_t r = 0; r < report.per_rank.size(); ++r) {
    const LmdbReadRankResult& p = report.per_rank[r];
    char digest[16];
    std::snprintf(digest, sizeof digest, "0x%08x", p.digest);
    std::printf("%4zu %9llu %12llu %10s %8.3f %8.3f %8.3f %8.3f %10llu\n", r,
                static_cast<unsigned long long>(p.counters.records),
                static_cast<unsigned long long>(p.counters.record_bytes), digest, p.times.io,
                p.times.copy, p.times.wait, p.times.skip,
                static_cast<unsigned long long>(p.counters.skipped));
  }
  std::printf("digest       0x%08x (all ranks; equal across modes for the same job)\n",
              report.digest);
  std::printf("time         %.3f s, %.3f ms/iteration; open %.3f s (slowest rank)\n", report.wall_s,
              report.wall_s * 1e3 / std::max<uint64_t>(args.options.iterations, 1),
              report.setup_s_max);
  std::printf(
      "cpu          %.3f s user, %.3f s sys; context switches %llu voluntary, %llu "
      "involuntary (all ranks)\n",
      sum.user_s, sum.sys_s, static_cast<unsigned long long>(sum.voluntary_switches),
      static_cast<unsigned long long>(sum.involuntary_switches));
  std::printf("bytes        %llu read for %llu of records\n",
              static_cast<unsigned long long>(sum.counters.read_bytes),
              static_cast<unsigned long long>(sum.counters.record_bytes));
  if (report.check) {
    std::printf("check        %llu mismatches; each record read %u to %u times\n",
                static_cast<unsigned long long>(report.check->mismatches),
                report.check->min_reads_per_record, report.check->max_reads_per_record);
  }
}

// Everything between MPI_Init and MPI_Finalize; returns the exit code.
int Run(const LmdbReadArgs& args, int rank) {
  // Errors are collective (the same on every rank); rank 0 prints them.
  auto fail = [&](const Status& st) {
    if (rank == 0) std::fprintf(stderr, "dlfs: %s\n", st.message().c_str());
    return kExitError;
  };
  const LmdbReadOptions& options = args.options;
  if (args.drop_cache) {
    if (rank == 0 && !DropPageCache()) {
      std::fprintf(stderr, "dlfs: warning: could not drop the page cache (needs root)\n");
    }
    MPI_Barrier(MPI_COMM_WORLD);
  }

  auto report = RunLmdbRead(MPI_COMM_WORLD, args.db, options);
  if (!report.ok()) return fail(report.status());
  // Say where the first mismatch was, wherever it happened.
  if (rank != 0) {
    if (report->first_mismatch.empty()) return kExitOk;
    std::fprintf(stderr, "dlfs: mismatch at %s\n", report->first_mismatch.c_str());
    return kExitDamaged;
  }
  if (args.json) {
    std::cout << ReportJson(args, *report).dump(2) << '\n';
  } else {
    PrintText(args, *report);
  }
  if (report->mismatches > 0) {
    std::fprintf(
        stderr, "dlfs: %llu records differ from the database (first: %s)\n",
        static_cast<unsigned long long>(report->mismatches),
        report->first_mismatch.empty() ? "on another rank" : report->first_mismatch.c_str());
    return kExitDamaged;
  }
  return kExitOk;
}

}  // namespace

int RunLmdbRead(const LmdbReadArgs& args) {
  // The reader is destroyed inside Run, before MPI_Finalize.
  return RunWithMpi([&](int rank, int) { return Run(args, rank); });
}

}  // namespace dlfs::cli
