// How much memory this process's job may really use: what the node cache's
// default budget is a fraction of (dlfs/loader.h, LoaderOptions::cache_budget).
//
// A scheduler (Slurm, a container runtime) limits a job with a memory
// cgroup, not with MemAvailable: a budget taken from MemAvailable alone gets
// such a job killed by the OOM killer. The limit read here is the smaller of
// MemAvailable and, for every memory cgroup from this process's up to the
// root (v2 `memory.max`, v1 `memory.limit_in_bytes`), its limit less what it
// already uses that the kernel cannot simply drop (usage less inactive file
// pages, as kubelet's working set).
//
// Thread safety: the functions are pure or read files only.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "dlfs/status.h"

namespace dlfs {

struct MemoryLimit {
  uint64_t mem_available = 0;  // /proc/meminfo MemAvailable; 0 when unreadable
  // The tightest cgroup: its limit and the usage counted against it; the
  // limit is 0 when no cgroup limits this process.
  uint64_t cgroup_limit = 0;
  uint64_t cgroup_usage = 0;
  std::string cgroup;  // the file that set cgroup_limit, for messages
  // What may still be used: min(mem_available, cgroup_limit - usage).
  uint64_t usable() const;
};

// Reads the limit of this process. `root` prefixes every path read
// ("/proc/...", "/sys/fs/cgroup/..."); tests point it at a fake tree.
MemoryLimit ReadMemoryLimit(const std::string& root = "");

// LoaderOptions::cache_budget meaning "a fraction of what may be used".
inline constexpr uint64_t kAutoCacheBudget = ~uint64_t{0};

// The cache budget a loader uses for `requested` bytes (kAutoCacheBudget:
// the environment's DLFS_CACHE_BUDGET if set, else a quarter of
// limit.usable()), clamped to half of limit.usable(): a budget that would
// leave the job too little memory is reduced, and `*note` (when not null)
// says so, naming the cgroup file; empty otherwise.
uint64_t ResolveCacheBudget(uint64_t requested, const MemoryLimit& limit,
                            std::string* note = nullptr);

// Whether `requested` (a LoaderOptions::cache_budget) is the user's request
// for a cache of that size: a value other than kAutoCacheBudget, or
// kAutoCacheBudget with a valid $DLFS_CACHE_BUDGET. A requested cache is
// filled whatever it costs; the automatic one by the loader's rule
// (LoaderOptions::planned_epochs).
bool CacheBudgetRequested(uint64_t requested);

// ResolveCacheBudget(kAutoCacheBudget, ReadMemoryLimit()).
uint64_t DefaultCacheBudget();

// "54.9 MB", "512 B": decimal units, one decimal above bytes; how memory
// figures appear in messages and reports, so that both print one number alike.
std::string HumanBytes(double bytes);

// "auto" (kAutoCacheBudget), or bytes with an optional K, M, G or T suffix
// (powers of 1024; "KB"/"KiB" alike): what --cache-budget, cache_budget=
// strings and DLFS_CACHE_BUDGET take. InvalidArgument naming the text.
Result<uint64_t> ParseByteBudget(std::string_view text);

}  // namespace dlfs
