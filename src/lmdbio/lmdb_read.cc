#include "dlfs_tools/lmdb_read.h"

#include <fcntl.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <type_traits>

#include "common/clock.h"
#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/lmdb.h"
#include "dlfs/mpi.h"
#include "dlfs_tools/bench.h"

namespace dlfs {

namespace {

static_assert(std::is_trivially_copyable_v<LmdbReadRankResult>,
              "gathered with MPI_BYTE: no pointers, no owning members");

double Seconds(const timeval& tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

void Add(LmdbReadRankResult& into, const LmdbReadRankResult& r) {
  into.times.io += r.times.io;
  into.times.copy += r.times.copy;
  into.times.wait += r.times.wait;
  into.times.skip += r.times.skip;
  into.times.setup += r.times.setup;
  into.counters.records += r.counters.records;
  into.counters.record_bytes += r.counters.record_bytes;
  into.counters.read_bytes += r.counters.read_bytes;
  into.counters.read_calls += r.counters.read_calls;
  into.counters.skipped += r.counters.skipped;
  into.counters.read_steps += r.counters.read_steps;
  into.counters.prefetch_bytes += r.counters.prefetch_bytes;
  into.user_s += r.user_s;
  into.sys_s += r.sys_s;
  into.voluntary_switches += r.voluntary_switches;
  into.involuntary_switches += r.involuntary_switches;
  into.mismatches += r.mismatches;
}

// The oracle for check: the parser's record map and plain preads.
class Oracle {
 public:
  Status Open(const std::string& db) {
    DLFS_ASSIGN_OR_RETURN(LmdbRecordMap map, LmdbRecordMap::Build(db));
    map_ = std::make_unique<LmdbRecordMap>(std::move(map));
    fd_ = ScopedFd(::open(map_->path().c_str(), O_RDONLY | O_CLOEXEC));
    if (fd_.get() < 0) return Status::FromErrno(errno, map_->path());
    return Status::Ok();
  }

  // Whether `bytes` is record `index`; a failed read is a mismatch too, with
  // the error in *why.
  bool Matches(uint64_t index, std::span<const std::byte> bytes, std::string* why) {
    expected_.resize(map_->value_length(index));
    const Status rd = PreadFull(fd_.get(), expected_.data(), expected_.size(),
                                map_->value_offset(index), map_->path());
    if (!rd.ok()) *why = rd.message();
    return rd.ok() && bytes.size() == expected_.size() &&
           std::equal(bytes.begin(), bytes.end(), expected_.begin());
  }
  std::string_view key(uint64_t index) const { return map_->key(index); }

 private:
  std::unique_ptr<LmdbRecordMap> map_;
  ScopedFd fd_;
  std::vector<std::byte> expected_;
};

// The "name value" lines of `path` whose value is a number, in order.
Result<std::vector<std::pair<std::string, double>>> ReadCounters(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Status::FromErrno(errno, path);
  std::vector<std::pair<std::string, double>> out;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string name, value, extra;
    if (!(fields >> name >> value) || (fields >> extra) || name[0] == '#') continue;
    char* end = nullptr;
    const double v = std::strtod(value.c_str(), &end);
    if (end != value.c_str() + value.size()) continue;
    out.emplace_back(name, v);
  }
  if (in.bad()) return Status::IOError(path + ": read failed");
  if (out.empty()) return Status::Corruption(path + ": no \"name value\" counter lines");
  return out;
}

}  // namespace

Result<LmdbReadReport> RunLmdbRead(MPI_Comm comm, const std::string& db,
                                   const LmdbReadOptions& options) {
  LmdbReadReport report;
  MPI_Comm_rank(comm, &report.rank);
  MPI_Comm_size(comm, &report.ranks);
  const int rank = report.rank;
  // The loop below and the check's reduction are collective.
  // Only rank 0 reads the counters file and drops the cache, but whether it
  // does decides which collectives run.
  DLFS_RETURN_IF_ERROR(
      AgreeOnValues(comm, {{"iterations", std::to_string(options.iterations)},
                           {"check", options.check ? "on" : "off"},
                           {"counters file", options.counters_file.empty() ? "none" : "given"},
                           {"drop cache", options.drop_cache ? "on" : "off"}}));
  Oracle oracle;
  if (options.check) {
    // Every rank stops, or none does (the reader's open is collective).
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, oracle.Open(db)));
  }
  // After the oracle's parse, which reads the whole database.
  if (options.drop_cache) {
    if (rank == 0 && !DropPageCache()) {
      std::fprintf(stderr, "dlfs: warning: could not drop the page cache (needs root)\n");
    }
    MPI_Barrier(comm);
  }

  LmdbioOptions reader_options = options.reader;
  reader_options.planned_iterations = options.iterations;
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<LmdbioReader> reader,
                        LmdbioReader::Open(comm, db, reader_options));
  report.description = reader->description();
  report.entries = reader->entries();

  std::vector<uint32_t> hits(options.check ? reader->entries() : 0);
  uint32_t digest = 0;
  uint64_t mismatches = 0;
  MPI_Barrier(comm);
  std::vector<std::pair<std::string, double>> counters_before;
  if (!options.counters_file.empty()) {
    Status st;
    if (rank == 0) {
      auto c = ReadCounters(options.counters_file);
      if (c.ok()) counters_before = std::move(*c);
      st = c.status();
    }
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));
  }
  const double start = Now();
  for (uint64_t i = 0; i < options.iterations; ++i) {
    DLFS_RETURN_IF_ERROR(reader->Next());  // collective: the same error on every rank
    for (uint32_t j = 0; j < reader->count(); ++j) {
      const auto bytes = reader->record(j);
      digest = crc32c::Extend(digest, bytes.data(), bytes.size());
      if (!options.check) continue;
      const uint64_t index = reader->record_index(j);
      ++hits[index];
      // A failed oracle read counts as a mismatch: returning early here
      // would leave the other ranks waiting in Next().
      std::string why;
      if (!oracle.Matches(index, bytes, &why) && mismatches++ == 0) {
        report.first_mismatch = "rank " + std::to_string(rank) + " iteration " + std::to_string(i) +
                                " record " + std::to_string(j) + " (key " +
                                std::string(oracle.key(index)) + ")" +
                                (why.empty() ? "" : ": " + why);
      }
    }
  }
  MPI_Barrier(comm);
  report.wall_s = Now() - start;
  getrusage(RUSAGE_SELF, &after);
  if (!options.counters_file.empty()) {
    Status st;
    if (rank == 0) {
      auto c = ReadCounters(options.counters_file);
      st = c.status();
      for (size_t k = 0; c.ok() && k < c->size(); ++k) {
        // Not a structured binding: clang 14 (the fuzzer build) cannot capture one.
        const auto& counter = (*c)[k];
        const auto was = std::find_if(counters_before.begin(), counters_before.end(),
                                      [&](const auto& b) { return b.first == counter.first; });
        if (was == counters_before.end()) continue;
        if (counter.second != was->second) {
          report.counters.emplace_back(counter.first, counter.second - was->second);
        } else {
          report.unchanged.emplace_back(counter.first, counter.second);
        }
      }
    }
    DLFS_RETURN_IF_ERROR(AgreeOnStatus(comm, st));
  }

  LmdbReadRankResult mine;
  std::memset(static_cast<void*>(&mine), 0, sizeof mine);  // padding too: it is sent as bytes
  mine.times = reader->times();
  mine.counters = reader->counters();
  mine.user_s = Seconds(after.ru_utime) - Seconds(before.ru_utime);
  mine.sys_s = Seconds(after.ru_stime) - Seconds(before.ru_stime);
  mine.voluntary_switches = static_cast<uint64_t>(after.ru_nvcsw - before.ru_nvcsw);
  mine.involuntary_switches = static_cast<uint64_t>(after.ru_nivcsw - before.ru_nivcsw);
  mine.mismatches = mismatches;
  mine.digest = digest;
  report.per_rank.resize(rank == 0 ? report.ranks : 0);
  MPI_Gather(&mine, sizeof mine, MPI_BYTE, report.per_rank.data(), sizeof mine, MPI_BYTE, 0, comm);
  MPI_Allreduce(&mismatches, &report.mismatches, 1, MPI_UINT64_T, MPI_SUM, comm);
  std::vector<uint32_t> total_hits(rank == 0 ? hits.size() : 0);
  if (options.check) {
    MPI_Reduce(hits.data(), total_hits.data(), static_cast<int>(hits.size()), MPI_UINT32_T, MPI_SUM,
               0, comm);
  }
  if (rank != 0) return report;

  for (const LmdbReadRankResult& r : report.per_rank) {
    report.digest = crc32c::Extend(report.digest, &r.digest, sizeof r.digest);
    Add(report.total, r);
    report.setup_s_max = std::max(report.setup_s_max, r.times.setup);
  }
  if (options.check) {
    LmdbReadCheck check;
    check.mismatches = report.mismatches;
    if (!total_hits.empty()) {
      const auto [lo, hi] = std::minmax_element(total_hits.begin(), total_hits.end());
      check.min_reads_per_record = *lo;
      check.max_reads_per_record = *hi;
    }
    report.check = check;
  }
  return report;
}

}  // namespace dlfs
