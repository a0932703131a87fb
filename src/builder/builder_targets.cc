// VolumeBuilder's targets: named and checked, created (docs/format.md §6
// and §6.1, step 1), and written through one buffer each. Every target is
// an io_internal::Target, so nothing here depends on what holds it.
#include <algorithm>
#include <cstring>
#include <set>

#include "builder/builder_impl.h"

namespace dlfs {

namespace {

constexpr size_t kWriteBuffer = 8u << 20;
// Flush leaves pages of zeros past a new file's written bytes as holes.
constexpr uint64_t kSparsePage = 4096;

bool AllZero(const std::byte* p, size_t n) {
  // Usually decided by the first word; a page of zeros is read in 64-byte
  // strides the compiler vectorizes.
  uint64_t first = 0;
  std::memcpy(&first, p, std::min<size_t>(n, 8));
  if (first != 0) return false;
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    uint64_t w[8];
    std::memcpy(w, p + i, 64);
    if ((w[0] | w[1] | w[2] | w[3] | w[4] | w[5] | w[6] | w[7]) != 0) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != std::byte{0}) return false;
  }
  return true;
}

// Zeroes the target's primary superblock and syncs: from then on it holds
// no valid target, whatever the rest of it holds.
Status Invalidate(io_internal::Target& target) {
  static const std::byte kZeros[format::kSuperblockSize] = {};
  DLFS_RETURN_IF_ERROR(target.Write(kZeros, sizeof kZeros, 0));
  return target.Sync();
}

// A target created over old contents (an export is rewritten in place; a
// new file holds nothing) may hold a dlfs target already: refused unless
// overwriting, and in any case made invalid before any other byte changes.
Status ClaimOldContents(io_internal::Target& target, bool overwrite) {
  if (target.size() == 0) return Status::Ok();
  format::Superblock old{};
  if (target.size() >= sizeof old) {
    DLFS_RETURN_IF_ERROR(target.Read(&old, sizeof old, 0, target.name()));
  }
  if (!overwrite && std::memcmp(old.magic, format::kSuperblockMagic, 8) == 0) {
    return Status::AlreadyExists(target.name() +
                                 ": holds a dlfs target already (set overwrite to replace it)");
  }
  return Invalidate(target);
}

}  // namespace

Status VolumeBuilder::Impl::NameTargets() {
  const std::vector<std::string> paths = options_.TargetPaths(path_);
  targets_.resize(paths.size());
  std::set<std::string> seen;
  for (uint32_t t = 0; t < paths.size(); ++t) {
    TargetFile& tf = targets_[t];
    tf.path = paths[t];
    if (tf.path.empty()) return Status::InvalidArgument("empty target path");
    // Target 0 must appear complete at once: it is the way into the volume.
    if (t == 0 && !io_internal::PublishedWhole(tf.path)) {
      return Status::InvalidArgument(tf.path +
                                     ": target 0 names the volume and must be a file or an s3:// "
                                     "object; write targets 1, 2, ... to NBD exports "
                                     "(target_paths)");
    }
    if (t > 0) {
      DLFS_ASSIGN_OR_RETURN(tf.stored_path,
                            io_internal::StoredTargetPath(path_, tf.path, format::kMaxTargetPath));
    }
    if (!seen.insert(io_internal::TargetIdentity(tf.path)).second) {
      return Status::InvalidArgument(tf.path + ": named as two targets of the volume");
    }
  }
  return Status::Ok();
}

Status VolumeBuilder::Impl::CreateTargets() {
  // An early error only; the no-replace publish at Finish is what enforces it.
  for (const TargetFile& tf : targets_) {
    DLFS_RETURN_IF_ERROR(io_internal::CheckNameFree(tf.path, options_.overwrite));
  }
  for (const TargetFile& tf : targets_) {
    for (std::string& r : io_internal::RemoveStaleTemporaries(tf.path)) {
      removed_temporaries_.push_back(std::move(r));
    }
  }
  // A failure leaves the targets created so far to ~Impl, which removes
  // their temporary files.
  for (TargetFile& tf : targets_) {
    DLFS_ASSIGN_OR_RETURN(tf.target,
                          io_internal::OpenTarget(tf.path, io_internal::TargetMode::kCreate,
                                                  {.overwrite = options_.overwrite}));
    if (tf.target->location() != tf.path) tf.temp_path = tf.target->location();
    tf.sparse = tf.target->kind() == TargetKind::kFile && tf.target->size() == 0;
    DLFS_RETURN_IF_ERROR(ClaimOldContents(*tf.target, options_.overwrite));
  }
  return Status::Ok();
}

Status VolumeBuilder::Impl::WriteOut(TargetFile& t, std::span<const std::byte> data,
                                     uint64_t start) {
  const uint64_t end = start + data.size();
  auto write = [&](uint64_t from, uint64_t to) -> Status {
    if (from == to) return Status::Ok();
    DLFS_RETURN_IF_ERROR(t.target->Write(data.data() + (from - start), to - from, from));
    t.written_end = std::max(t.written_end, to);
    return Status::Ok();
  };
  if (!t.sparse || end <= t.written_end) return write(start, end);
  // Bytes up to the furthest write so far are written whatever they are
  // (they may cover older bytes, after a Rewind); past it, pages that are
  // all zeros are left as holes.
  const uint64_t fresh = std::max(start, t.written_end);
  DLFS_RETURN_IF_ERROR(write(start, fresh));
  uint64_t run = fresh;  // the pending run of bytes to write starts here
  for (uint64_t a = fresh; a < end;) {
    const uint64_t b = std::min(end, format::AlignUp(a + 1, kSparsePage));
    if (AllZero(data.data() + (a - start), b - a)) {
      DLFS_RETURN_IF_ERROR(write(run, a));
      run = b;
    }
    a = b;
  }
  return write(run, end);
}

namespace builder_internal {

WriteBehind::WriteBehind(WriteFn write) : write_(std::move(write)) {
  thread_ = std::thread([this] { Run(); });
}

WriteBehind::~WriteBehind() {
  {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return !pending_; });
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void WriteBehind::Run() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [&] { return pending_ || stop_; });
    if (!pending_) return;
    std::vector<std::byte> job = std::move(job_);
    const uint64_t offset = offset_;
    const bool failed = !error_.ok();
    lock.unlock();
    // After a failure nothing more is written: the builder fails.
    Status st = failed ? Status::Ok() : write_(job, offset);
    lock.lock();
    if (error_.ok()) error_ = std::move(st);
    job.clear();
    spare_ = std::move(job);
    pending_ = false;
    cv_.notify_all();
  }
}

Status WriteBehind::Submit(std::vector<std::byte>* data, uint64_t offset) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !pending_; });
  if (!error_.ok()) return error_;
  job_ = std::move(*data);
  *data = std::move(spare_);
  data->clear();
  offset_ = offset;
  pending_ = true;
  cv_.notify_all();
  return Status::Ok();
}

Status WriteBehind::Wait() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !pending_; });
  return error_;
}

}  // namespace builder_internal

Status VolumeBuilder::Impl::Flush(TargetFile& t) {
  if (t.behind) {
    // Handed over and waited for: a Flush leaves every byte in the target.
    if (!t.buf.empty()) {
      const uint64_t n = t.buf.size();
      DLFS_RETURN_IF_ERROR(t.behind->Submit(&t.buf, t.buf_start));
      t.buf_start += n;
    }
    return t.behind->Wait();
  }
  if (t.buf.empty()) return Status::Ok();
  DLFS_RETURN_IF_ERROR(WriteOut(t, t.buf, t.buf_start));
  t.buf_start += t.buf.size();
  t.buf.clear();
  return Status::Ok();
}

Status VolumeBuilder::Impl::Write(TargetFile& t, std::span<const std::byte> data) {
  if (t.behind) {
    // Copied into buffers the thread writes while the caller goes on.
    while (!data.empty()) {
      if (t.buf.capacity() < kWriteBuffer) t.buf.reserve(kWriteBuffer);
      const size_t n = std::min(kWriteBuffer - t.buf.size(), data.size());
      t.buf.insert(t.buf.end(), data.begin(), data.begin() + n);
      data = data.subspan(n);
      if (t.buf.size() == kWriteBuffer) {
        DLFS_RETURN_IF_ERROR(t.behind->Submit(&t.buf, t.buf_start));
        t.buf_start += kWriteBuffer;
      }
    }
    return Status::Ok();
  }
  if (data.size() >= kWriteBuffer) {
    // Large: written from the caller's memory, not copied through the buffer.
    DLFS_RETURN_IF_ERROR(Flush(t));
    DLFS_RETURN_IF_ERROR(WriteOut(t, data, t.buf_start));
    t.buf_start += data.size();
    return Status::Ok();
  }
  // Grown as data comes (up to kWriteBuffer), not reserved whole: a small
  // volume, or a target that never receives a sample, does not pay for
  // 8 MiB.
  while (!data.empty()) {
    const size_t room = kWriteBuffer - t.buf.size();
    const size_t n = std::min(room, data.size());
    t.buf.insert(t.buf.end(), data.begin(), data.begin() + n);
    data = data.subspan(n);
    if (t.buf.size() == kWriteBuffer) DLFS_RETURN_IF_ERROR(Flush(t));
  }
  return Status::Ok();
}

void VolumeBuilder::Impl::Rewind(TargetFile& t, uint64_t pos) {
  if (pos >= t.buf_start) {
    t.buf.resize(pos - t.buf_start);
  } else {
    t.buf.clear();
    t.buf_start = pos;
  }
}

Status VolumeBuilder::Impl::Pad(TargetFile& t, uint64_t align) {
  static const std::byte kZeros[4096] = {};
  uint64_t pad = format::AlignUp(t.Tell(), align) - t.Tell();
  while (pad > 0) {
    const uint64_t n = std::min<uint64_t>(pad, sizeof kZeros);
    DLFS_RETURN_IF_ERROR(Write(t, {kZeros, n}));
    pad -= n;
  }
  return Status::Ok();
}

// Greedy balance: the next sample goes to the target holding the fewest
// bytes so far (the lowest index on ties), so the placement depends only
// on the order and sizes of the samples — packing twice gives the same
// volume layout. Samples stream, so the choice cannot wait for the size
// of the sample being placed; the imbalance stays below one sample.
uint32_t VolumeBuilder::Impl::PickTarget() const {
  uint32_t best = 0;
  for (uint32_t t = 1; t < targets_.size(); ++t) {
    if (targets_[t].Tell() < targets_[best].Tell()) best = t;
  }
  return best;
}

}  // namespace dlfs
