#include "loader/batch_planner.h"

#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

namespace dlfs::loader_internal {

void PlanBatch(const SampleDirectory& dir, std::span<const uint64_t> indices,
               const PlanOptions& options, BatchPlan* plan) {
  plan->reads.clear();
  plan->sample_offsets.assign(indices.size(), 0);
  plan->buffer_bytes = 0;
  plan->sample_bytes = 0;
  const uint64_t a = std::max<uint32_t>(options.alignment, 1);
  const uint64_t max_read = std::max<uint64_t>(options.read.max_read / a * a, a);

  std::vector<uint32_t> order;
  order.reserve(indices.size());
  std::vector<SampleInfo>& info = plan->info;
  info.resize(indices.size());
  dir.LocateMany(indices, info, &plan->unlocated);
  for (size_t k = 0; k < indices.size(); ++k) {
    if (plan->unlocated.empty() || plan->unlocated[k].ok())
      order.push_back(static_cast<uint32_t>(k));
  }
  std::sort(order.begin(), order.end(), [&](uint32_t x, uint32_t y) {
    if (info[x].target != info[y].target) return info[x].target < info[y].target;
    return info[x].offset < info[y].offset;
  });

  // A run is a contiguous aligned file range [begin, end) on one target.
  uint32_t run_target = 0;
  uint64_t run_begin = 0, run_end = 0;
  bool open = false;
  auto close_run = [&] {
    if (!open) return;
    for (uint64_t at = run_begin; at < run_end; at += max_read) {
      const uint64_t len = std::min(max_read, run_end - at);
      plan->reads.push_back(PlannedRead{run_target, at, len, plan->buffer_bytes});
      plan->buffer_bytes += len;
    }
    open = false;
  };
  // Buffer offset of the current run's first byte.
  uint64_t run_buffer = 0;
  for (uint32_t k : order) {
    const SampleInfo& s = info[k];
    plan->sample_bytes += s.length;
    const uint64_t begin = s.offset / a * a;
    const uint64_t end = std::max((s.offset + s.length + a - 1) / a * a, begin + a);
    const bool joins = open && options.read.coalesce && s.target == run_target &&
                       begin <= run_end + options.read.coalesce_gap &&
                       std::max(end, run_end) - run_begin <= max_read;
    if (!joins) {
      close_run();
      run_target = s.target;
      run_begin = begin;
      run_end = end;
      run_buffer = plan->buffer_bytes;
      open = true;
    } else {
      run_end = std::max(run_end, end);
    }
    plan->sample_offsets[k] = run_buffer + (s.offset - run_begin);
  }
  close_run();
}

namespace {

// The positions (of `n`) a probe of at most 65,536 samples looks at: 64
// runs of 1,024 consecutive positions spread over the whole. Runs, not a
// sample every n / 65,536: a compact directory's records lie in blocks of
// consecutive samples, so 64 runs read about 64 blocks' records (half a
// megabyte at 1e9 samples), where 65,536 scattered samples read nearly all
// of them (7 GB at 1e9, seconds before the first batch when cold). Each
// run's first sample is located first, all together: LocateMany asks the
// kernel for their blocks' pages at once, so 64 cold blocks cost one wait,
// not 64.
template <typename Visit>
void ForProbeSamples(const SampleDirectory& dir, const SampleSubset& subset, uint64_t n,
                     Visit visit) {
  constexpr uint64_t kRuns = 64, kRun = 1024;
  const bool all = n <= kRuns * kRun;
  const uint64_t runs = all ? (n + kRun - 1) / kRun : kRuns;
  auto run_start = [&](uint64_t r) {
    return all ? r * kRun
               : static_cast<uint64_t>(static_cast<unsigned __int128>(r) * (n - kRun) /
                                       (kRuns - 1));
  };
  // A run at a time, in buffers of one run (the memory stays small: a
  // loader made in each of many ranks keeps what malloc took), after the
  // first sample of every run was located together to fetch their blocks.
  std::vector<uint64_t> indices;
  std::vector<SampleInfo> info;
  std::vector<Status> failed;
  for (uint64_t r = 0; r < runs; ++r) indices.push_back(subset.At(run_start(r)));
  info.resize(indices.size());
  dir.LocateMany(indices, info, &failed);
  for (uint64_t r = 0; r < runs; ++r) {
    const uint64_t first = run_start(r), count = std::min(kRun, n - first);
    indices.clear();
    for (uint64_t k = first; k < first + count; ++k) indices.push_back(subset.At(k));
    info.resize(indices.size());
    dir.LocateMany(indices, info, &failed);
    // A sample that cannot be located (a damaged block) tells nothing of
    // the sizes; the read of it reports the damage.
    for (size_t k = 0; k < info.size(); ++k) {
      if (failed.empty() || failed[k].ok()) visit(info[k]);
    }
  }
}

}  // namespace

double DirectReadAmplification(const SampleDirectory& dir, const SampleSubset& subset,
                               uint32_t alignment) {
  const uint64_t n = subset.Count(dir.size());
  if (n == 0 || alignment <= 1) return 1;
  const uint64_t a = alignment;
  double extents = 0, bytes = 0;
  ForProbeSamples(dir, subset, n, [&](const SampleInfo& s) {
    if (s.length == 0) return;
    const uint64_t begin = s.offset / a * a, end = (s.offset + s.length + a - 1) / a * a;
    extents += static_cast<double>(end - begin);
    bytes += static_cast<double>(s.length);
  });
  return bytes > 0 ? extents / bytes : 1;
}

SampleSizes MeasureSampleSizes(const SampleDirectory& dir, const SampleSubset& subset,
                               uint64_t align) {
  const uint64_t n = subset.Count(dir.size());
  SampleSizes s;
  if (n == 0) return s;
  align = std::max<uint64_t>(align, 1);
  double sum = 0, squares = 0, looked = 0;
  ForProbeSamples(dir, subset, n, [&](const SampleInfo& probed) {
    const uint64_t len = (probed.length + align - 1) / align * align;
    sum += static_cast<double>(len);
    squares += static_cast<double>(len) * static_cast<double>(len);
    s.largest = std::max(s.largest, len);
    ++looked;
  });
  if (looked == 0) return s;
  const double mean = sum / looked;
  s.exact_mean = mean;
  s.mean = static_cast<uint64_t>(std::ceil(mean));
  s.stddev = std::sqrt(std::max(0.0, squares / looked - mean * mean));
  return s;
}

// Not in <linux/magic.h> (ZFS is not in the kernel's tree).
constexpr uint64_t kZfsSuperMagic = 0x2fc12fc1;

bool OnLocalDisks(const Volume& volume) {
  const std::vector<TargetInfo>& targets = volume.info().target_details;
  for (uint32_t t = 0; t < targets.size(); ++t) {
    const int fd = volume.target_fd(t);
    struct stat st {};
    struct statfs fs {};
    if (fd < 0 || ::fstat(fd, &st) != 0) return false;
    if (S_ISBLK(st.st_mode)) continue;
    if (::fstatfs(fd, &fs) != 0) return false;
    switch (static_cast<uint64_t>(fs.f_type)) {
      case EXT4_SUPER_MAGIC:  // also ext2 and ext3
      case XFS_SUPER_MAGIC:
      case BTRFS_SUPER_MAGIC:
      case TMPFS_MAGIC:
      case RAMFS_MAGIC:
      case F2FS_SUPER_MAGIC:
      case OVERLAYFS_SUPER_MAGIC:  // a container's root, over a local disk
      case kZfsSuperMagic:
        continue;
      default:
        return false;
    }
  }
  return !targets.empty();
}

Result<std::unique_ptr<IoEngine>> CreateEngineForSamples(const Volume& volume,
                                                         const SampleSubset& subset,
                                                         bool auto_direct_io, bool map_buffered,
                                                         EngineOptions* options,
                                                         std::string* note) {
  note->clear();
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<IoEngine> engine,
                        CreateEngine(volume.OpenTargetPaths(), *options));
  if (!options->direct_io || !auto_direct_io || engine->alignment() <= 1) return engine;
  const double amplification =
      DirectReadAmplification(volume.directory(), subset, engine->alignment());
  if (amplification < kBufferedAbove) return engine;
  options->direct_io = false;
  if (map_buffered && options->kind == EngineKind::kAuto && OnLocalDisks(volume)) {
    options->kind = EngineKind::kMmap;
  }
  engine.reset();
  DLFS_ASSIGN_OR_RETURN(engine, CreateEngine(volume.OpenTargetPaths(), *options));
  char text[160];
  std::snprintf(text, sizeof text,
                "buffered reads: with O_DIRECT each sample would read %.1fx its bytes",
                amplification);
  *note = text;
  return engine;
}

}  // namespace dlfs::loader_internal
