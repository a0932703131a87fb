// The MPI runs' reports (dlfs_tools/mpi_report.h).
#include "dlfs_tools/mpi_report.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "report/report_util.h"

namespace dlfs {

using nlohmann::json;
using report_internal::Printf;

std::string FormatJobEpochLine(const EpochReport& e, int ranks) {
  return Printf("epoch %llu: %llu samples in %.2f s: %.0f samples/s, %.1f MB/s (%d ranks)\n",
                static_cast<unsigned long long>(e.epoch),
                static_cast<unsigned long long>(e.samples), e.seconds, e.samples_per_s(),
                e.mb_per_s(), ranks);
}

namespace {

const char* ModeName(const BenchJobSetup& setup) {
  if (setup.cluster_cache) return "cluster-cache";
  return setup.shard_local ? "shard-local" : "local";
}

}  // namespace

std::string FormatBenchJobReport(const BenchJobReport& r, const BenchJobSetup& setup,
                                 ReportFormat format) {
  if (format == ReportFormat::kJson) {
    json epochs = json::array();
    for (const EpochReport& e : r.bench.epochs) {
      epochs.push_back({{"epoch", e.epoch},
                        {"samples", e.samples},
                        {"seconds", e.seconds},
                        {"samples_per_s", e.samples_per_s()},
                        {"mb_per_s", e.mb_per_s()},
                        {"storage_bytes", e.device_bytes},
                        {"peer_bytes", e.peer_bytes},
                        {"cpu_s_per_gb", e.cpu_s_per_gb()}});
    }
    json cluster = nullptr;
    if (setup.cluster_cache) {
      cluster = {{"node_cache_capacity", r.node_cache_capacity},
                 {"node_cache_bytes", r.node_cache_bytes},
                 {"storage_bytes", r.shard.storage_bytes},
                 {"peer_bytes", r.shard.peer_bytes},
                 {"cached_samples", r.shard.cached_samples},
                 {"remote_samples", r.shard.remote_samples},
                 {"absent_samples", r.shard.absent_samples},
                 {"gifts_sent", r.shard.gifts_sent},
                 {"gifts_kept", r.shard.gifts_kept}};
    }
    return report_internal::Dump({{"volume", setup.volume},
                                  {"ranks", r.ranks},
                                  {"mode", ModeName(setup)},
                                  {"open", setup.private_open ? "per rank" : "collective"},
                                  {"engine", r.bench.source},
                                  {"batch", setup.batch},
                                  {"samples", r.bench.total.samples},
                                  {"seconds", r.bench.total.seconds},
                                  {"samples_per_s", r.bench.total.samples_per_s()},
                                  {"open_seconds_max", r.open_seconds_max},
                                  {"metadata_bytes_read", r.metadata_bytes_read},
                                  {"directory_window_bytes", r.directory_window_bytes},
                                  {"directory_bytes", r.directory_bytes},
                                  {"open_pss_bytes", r.open_pss_bytes},
                                  {"mpi_bytes_received", r.shard.bytes_received},
                                  {"remote_samples", r.shard.remote_samples},
                                  {"shard_io_seconds_max", r.shard_io_seconds_max},
                                  {"shard_exchange_seconds_max", r.shard_exchange_seconds_max},
                                  {"cluster_cache", cluster},
                                  {"cache_plan", r.cache_plan},
                                  {"ranks_filling", r.ranks_filling},
                                  {"epochs", epochs}},
                                 2);
  }
  // Direct: every rank reads any target itself, from local devices or
  // from storage servers (NBD URIs: the disaggregated mode).
  std::string out = Printf("job          %d ranks, %s reading, %s open\n", r.ranks,
                           setup.cluster_cache ? "cluster-cache"
                           : setup.shard_local ? "shard-local"
                                               : "direct (every rank reads every target)",
                           setup.private_open ? "per-rank" : "collective");
  out += Printf("engine       %s\n", r.bench.source.c_str());
  out += Printf("samples/s    %.0f (all ranks)\n", r.bench.total.samples_per_s());
  out += Printf("open         %.3f s (slowest rank); %llu metadata bytes read from storage\n",
                r.open_seconds_max, static_cast<unsigned long long>(r.metadata_bytes_read));
  out += Printf(
      "memory       %.1f MB more proportional set size over all ranks after the open "
      "(directory %.1f MB)\n",
      r.open_pss_bytes / 1e6, r.directory_bytes / 1e6);
  if (!r.cache_plan.empty()) {
    out += Printf("cache plan   %s; %d of %d ranks fill\n", r.cache_plan.c_str(), r.ranks_filling,
                  r.ranks);
  }
  if (setup.shard_local) {
    out += Printf(
        "exchanged    %llu samples, %.1f MB over MPI; slowest rank: %.2f s in "
        "exchanges, of which %.2f s reading\n",
        static_cast<unsigned long long>(r.shard.remote_samples), r.shard.bytes_received / 1e6,
        r.shard_exchange_seconds_max, r.shard_io_seconds_max);
  }
  if (setup.cluster_cache) {
    uint64_t held = 0, capacity = 0;
    for (uint64_t b : r.node_cache_bytes) held += b;
    for (uint64_t b : r.node_cache_capacity) capacity += b;
    out += Printf(
        "cluster      %zu node caches hold %.1f of %.1f MB; read %.1f MB from storage, "
        "%.1f MB from peers' caches\n",
        r.node_cache_bytes.size(), held / 1e6, capacity / 1e6, r.shard.storage_bytes / 1e6,
        r.shard.peer_bytes / 1e6);
    for (const EpochReport& e : r.bench.epochs) {
      out += Printf("  epoch %llu    %.1f MB from storage, %.1f MB from peers\n",
                    static_cast<unsigned long long>(e.epoch), e.device_bytes / 1e6,
                    e.peer_bytes / 1e6);
    }
  }
  return out;
}

namespace {

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

json LmdbReadJson(const std::string& db, const LmdbReadOptions& options,
                  const LmdbReadReport& report) {
  const LmdbReadRankResult& sum = report.total;
  json per_rank = json::array();
  for (size_t r = 0; r < report.per_rank.size(); ++r) {
    per_rank.push_back(RankJson(static_cast<int>(r), report.per_rank[r]));
  }
  json j = {{"db", db},
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
  if (!report.counters.empty() || !report.unchanged.empty()) {
    json counters = json::object();
    for (const auto& [name, value] : report.counters) counters[name] = value;
    j["counters"] = counters;
    json unchanged = json::object();
    for (const auto& [name, value] : report.unchanged) unchanged[name] = value;
    j["counters_unchanged"] = unchanged;
  }
  if (report.check) {
    j["check"] = {{"mismatches", report.check->mismatches},
                  {"min_reads_per_record", report.check->min_reads_per_record},
                  {"max_reads_per_record", report.check->max_reads_per_record}};
  }
  return j;
}

}  // namespace

std::string FormatLmdbReadReport(const std::string& db, const LmdbReadOptions& options,
                                 const LmdbReadReport& report, ReportFormat format) {
  if (format == ReportFormat::kJson) {
    return report_internal::Dump(LmdbReadJson(db, options, report), 2);
  }
  const LmdbReadRankResult& sum = report.total;
  std::string out = Printf("lmdb read    %s\n", db.c_str());
  out += Printf("mode         %s\n", report.description.c_str());
  out += Printf("job          %d ranks, batch %u, %llu iterations, %llu records in the database\n",
                report.ranks, options.reader.batch_size,
                static_cast<unsigned long long>(options.iterations),
                static_cast<unsigned long long>(report.entries));
  out += Printf("%4s %9s %12s %10s %8s %8s %8s %8s %10s\n", "rank", "records", "bytes", "digest",
                "io s", "copy s", "wait s", "skip s", "skipped");
  for (size_t r = 0; r < report.per_rank.size(); ++r) {
    const LmdbReadRankResult& p = report.per_rank[r];
    const std::string digest = Printf("0x%08x", p.digest);
    out += Printf("%4zu %9llu %12llu %10s %8.3f %8.3f %8.3f %8.3f %10llu\n", r,
                  static_cast<unsigned long long>(p.counters.records),
                  static_cast<unsigned long long>(p.counters.record_bytes), digest.c_str(),
                  p.times.io, p.times.copy, p.times.wait, p.times.skip,
                  static_cast<unsigned long long>(p.counters.skipped));
  }
  out += Printf("digest       0x%08x (all ranks; equal across modes for the same job)\n",
                report.digest);
  out +=
      Printf("time         %.3f s, %.3f ms/iteration; open %.3f s (slowest rank)\n", report.wall_s,
             report.wall_s * 1e3 / std::max<uint64_t>(options.iterations, 1), report.setup_s_max);
  out += Printf(
      "cpu          %.3f s user, %.3f s sys; context switches %llu voluntary, %llu "
      "involuntary (all ranks)\n",
      sum.user_s, sum.sys_s, static_cast<unsigned long long>(sum.voluntary_switches),
      static_cast<unsigned long long>(sum.involuntary_switches));
  out += Printf("bytes        %llu read for %llu of records\n",
                static_cast<unsigned long long>(sum.counters.read_bytes),
                static_cast<unsigned long long>(sum.counters.record_bytes));
  if (!report.unchanged.empty()) {
    std::string values;
    for (const auto& [name, value] : report.unchanged) {
      values += Printf("%s%s %.15g", values.empty() ? "" : ", ", name.c_str(), value);
    }
    out += Printf("unchanged    %s\n", values.c_str());
  }
  for (const auto& [name, value] : report.counters) {
    out += Printf("counter      %s +%.15g\n", name.c_str(), value);
  }
  if (report.check) {
    out += Printf("check        %llu mismatches; each record read %u to %u times\n",
                  static_cast<unsigned long long>(report.check->mismatches),
                  report.check->min_reads_per_record, report.check->max_reads_per_record);
  }
  return out;
}

}  // namespace dlfs
