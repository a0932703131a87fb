#include "dlfs/memory.h"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <optional>
#include <sstream>
#include <vector>

namespace dlfs {

namespace {

// The first number in `path`; nullopt when unreadable or "max".
std::optional<uint64_t> ReadNumber(const std::string& path) {
  std::ifstream in(path);
  std::string word;
  if (!(in >> word) || word == "max") return std::nullopt;
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(word.data(), word.data() + word.size(), v);
  if (ec != std::errc() || end != word.data() + word.size()) return std::nullopt;
  return v;
}

// `key value` from a memory.stat file, or 0.
uint64_t StatValue(const std::string& path, std::string_view key) {
  std::ifstream in(path);
  std::string k;
  uint64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return 0;
}

// The cgroup paths of this process: (v1 memory path, v2 path); empty when
// the process is in no such hierarchy.
std::pair<std::string, std::string> CgroupPaths(const std::string& root) {
  std::ifstream in(root + "/proc/self/cgroup");
  std::string line, v1, v2;
  while (std::getline(in, line)) {
    // "ID:CONTROLLERS:PATH"; v2 is "0::PATH".
    const size_t a = line.find(':');
    const size_t b = a == line.npos ? a : line.find(':', a + 1);
    if (b == line.npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    const std::string path = line.substr(b + 1);
    if (controllers.empty()) {
      v2 = path;
      continue;
    }
    std::stringstream names(controllers);
    for (std::string c; std::getline(names, c, ',');) {
      if (c == "memory") v1 = path;
    }
  }
  return {v1, v2};
}

// Tightest limit along `dir` and its ancestors up to `top`, with the usage
// counted against it.
void TightestLimit(const std::string& top, std::string rel, const char* limit_file,
                   const char* usage_file, const char* inactive_key, MemoryLimit* out) {
  while (true) {
    const std::string dir = top + (rel == "/" ? "" : rel);
    if (const auto limit = ReadNumber(dir + "/" + limit_file)) {
      // v1 writes "unlimited" as a page-rounded LONG_MAX: no limit.
      if (*limit < (uint64_t{1} << 60)) {
        const uint64_t used = ReadNumber(dir + "/" + usage_file).value_or(0);
        const uint64_t inactive = StatValue(dir + "/memory.stat", inactive_key);
        const uint64_t working = used > inactive ? used - inactive : 0;
        const uint64_t left = *limit > working ? *limit - working : 0;
        const uint64_t best =
            out->cgroup_limit > out->cgroup_usage ? out->cgroup_limit - out->cgroup_usage : 0;
        if (out->cgroup_limit == 0 || left < best) {
          out->cgroup_limit = *limit;
          out->cgroup_usage = working;
          out->cgroup = dir + "/" + limit_file;
        }
      }
    }
    if (rel.empty() || rel == "/") break;
    const size_t slash = rel.rfind('/');
    rel = slash == 0 ? "/" : rel.substr(0, slash);
  }
}

}  // namespace

uint64_t MemoryLimit::usable() const {
  uint64_t u = mem_available;
  if (cgroup_limit > 0) {
    const uint64_t left = cgroup_limit > cgroup_usage ? cgroup_limit - cgroup_usage : 0;
    u = u == 0 ? left : std::min(u, left);
  }
  return u;
}

MemoryLimit ReadMemoryLimit(const std::string& root) {
  MemoryLimit m;
  {
    std::ifstream in(root + "/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (in >> key >> kb) {
      std::getline(in, unit);
      if (key == "MemAvailable:") {
        m.mem_available = kb * 1024;
        break;
      }
    }
  }
  const auto [v1, v2] = CgroupPaths(root);
  if (!v1.empty()) {
    TightestLimit(root + "/sys/fs/cgroup/memory", v1, "memory.limit_in_bytes",
                  "memory.usage_in_bytes", "total_inactive_file", &m);
  }
  if (!v2.empty()) {
    // Unified hierarchy: mounted at /sys/fs/cgroup, or at
    // /sys/fs/cgroup/unified beside v1 controllers (hybrid).
    for (const char* top : {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"}) {
      TightestLimit(root + top, v2, "memory.max", "memory.current", "inactive_file", &m);
    }
  }
  return m;
}

uint64_t ResolveCacheBudget(uint64_t requested, const MemoryLimit& limit, std::string* note) {
  if (note) note->clear();
  if (requested == kAutoCacheBudget) {
    if (const char* env = std::getenv("DLFS_CACHE_BUDGET"); env != nullptr && *env != '\0') {
      const Result<uint64_t> parsed = ParseByteBudget(env);
      if (parsed.ok()) {
        requested = *parsed;
      } else if (note) {
        *note = "DLFS_CACHE_BUDGET: " + parsed.status().message() + "; using the default";
      }
    }
  }
  const uint64_t usable = limit.usable();
  if (requested == kAutoCacheBudget) return usable / 4;
  if (requested > usable / 2) {
    if (note) {
      const auto mb = [](uint64_t b) { return HumanBytes(static_cast<double>(b)); };
      *note = "cache budget of " + mb(requested) + " reduced to " + mb(usable / 2) +
              ", half of the memory this job may still use (" +
              (limit.cgroup_limit > 0 && usable < limit.mem_available
                   ? "limit " + mb(limit.cgroup_limit) + " in " + limit.cgroup + ", " +
                         mb(limit.cgroup_usage) + " in use"
                   : "MemAvailable " + mb(limit.mem_available)) +
              ")";
    }
    return usable / 2;
  }
  return requested;
}

bool CacheBudgetRequested(uint64_t requested) {
  if (requested != kAutoCacheBudget) return requested != 0;
  const char* env = std::getenv("DLFS_CACHE_BUDGET");
  return env != nullptr && *env != '\0' && ParseByteBudget(env).ok();
}

uint64_t DefaultCacheBudget() { return ResolveCacheBudget(kAutoCacheBudget, ReadMemoryLimit()); }

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  char out[32];
  std::snprintf(out, sizeof out, u == 0 ? "%.0f %s" : "%.1f %s", b, units[u]);
  return out;
}

Result<uint64_t> ParseByteBudget(std::string_view text) {
  if (text == "auto") return kAutoCacheBudget;
  const auto bad = [&] {
    return Status::InvalidArgument("cache budget '" + std::string(text) +
                                   "': expected auto or bytes with an optional K, M, G or T "
                                   "suffix (e.g. 512M)");
  };
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end == text.data()) return bad();
  const std::string_view unit = text.substr(static_cast<size_t>(end - text.data()));
  uint64_t scale = 1;
  if (!unit.empty()) {
    const size_t k = std::string_view("KMGT").find(
        static_cast<char>(std::toupper(static_cast<unsigned char>(unit[0]))));
    const std::string_view rest = unit.substr(1);
    if (k == std::string_view::npos ||
        !(rest.empty() || rest == "B" || rest == "b" || rest == "iB" || rest == "ib")) {
      return bad();
    }
    scale = uint64_t{1} << (10 * (k + 1));
  }
  if (v > ~uint64_t{0} / scale) return bad();
  return v * scale;
}

}  // namespace dlfs
