#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <numeric>
#include <optional>
#include <set>
#include <unordered_map>

#include "common/crc32c.h"
#include "common/file_util.h"
#include "dlfs/builder.h"
#include "dlfs/nbd.h"
#include "format/directory_codec.h"
#include "format/format.h"
#include "format/superblock.h"
#include "format/zstd_field.h"
#include "nbd/nbd_client.h"

namespace dlfs {

namespace {

constexpr size_t kWriteBuffer = 8u << 20;
constexpr uint32_t kEmptySlot = 0xFFFFFFFFu;
constexpr size_t kMinPathSlots = 1024;

// Entries kept per added sample and directory until Finish() orders them:
// the codec's tree types, so Finish hands them over without a copy.
using PendingSample = format::TreeSample;
using PendingDir = format::TreeDir;

Status ValidateComponent(std::string_view c, std::string_view path) {
  if (c.empty() || c == "." || c == "..") {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': empty, '.' or '..' component");
  }
  if (c.size() > 0xFFFF) {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': component longer than 65535 bytes");
  }
  if (c.find('\0') != c.npos) {
    return Status::InvalidArgument("bad sample path: NUL byte in '" + std::string(path) + "'");
  }
  return Status::Ok();
}

// What target 0's table records for target `target`: its path relative to
// the directory holding target 0 when it lies at or below it (so the files
// can be moved as a set), else its absolute path. Both are lexical: symlinks
// are not resolved, as a reader joins a relative path to the directory of
// target 0 as it was named.
Result<std::string> StoredTargetPath(const std::string& target0, const std::string& target) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path abs0 = fs::absolute(target0, ec).lexically_normal();
  if (ec) return Status::FromErrno(ec.value(), target0);
  const fs::path abs = fs::absolute(target, ec).lexically_normal();
  if (ec) return Status::FromErrno(ec.value(), target);
  const fs::path rel = abs.lexically_relative(abs0.parent_path());
  std::string stored = !rel.empty() && *rel.begin() != ".." ? rel.string() : abs.string();
  if (abs == abs0 || stored.empty() || stored == "." || abs.filename().empty()) {
    return Status::InvalidArgument(target + ": not usable as a target file of " + target0);
  }
  if (stored.size() > format::kMaxTargetPath) {
    return Status::InvalidArgument(target + ": target path '" + stored + "' is longer than " +
                                   std::to_string(format::kMaxTargetPath) +
                                   " bytes (place it nearer to " + target0 + ")");
  }
  return stored;
}

// Takes (or tests) a write lock on the whole file behind `fd`: an open file
// description lock, held until the descriptor is closed, released by the
// kernel when its process dies (SIGKILL included).
bool LockWhole(int fd) {
  struct flock lk {};
  lk.l_type = F_WRLCK;
  lk.l_whence = SEEK_SET;
  return ::fcntl(fd, F_OFD_SETLK, &lk) == 0;
}

// If `name` is "<base>.tmp.<pid>.<n>", the pid; else 0.
pid_t TemporaryOwner(std::string_view name, std::string_view base) {
  if (!name.starts_with(base) || !name.substr(base.size()).starts_with(".tmp.")) return 0;
  std::string_view rest = name.substr(base.size() + 5);
  const size_t dot = rest.find('.');
  if (dot == rest.npos || dot == 0 || dot + 1 == rest.size()) return 0;
  const auto digits = [](std::string_view d) {
    return d.find_first_not_of("0123456789") == d.npos;
  };
  if (!digits(rest.substr(0, dot)) || !digits(rest.substr(dot + 1)) || dot > 9) return 0;
  return static_cast<pid_t>(std::stol(std::string(rest.substr(0, dot))));
}

// Removes the temporary files a builder writing `path` left behind when its
// process was killed: "<path>.tmp.<pid>.<n>" whose process no longer runs
// on this host and whose lock nobody holds (a live builder on another node
// of a shared file system holds its lock; a dead one's lock is released).
// Files of other users and anything that is not a plain file are left alone.
std::vector<std::string> RemoveStaleTemporaries(const std::string& path) {
  namespace fs = std::filesystem;
  std::vector<std::string> removed;
  const fs::path p(path);
  const std::string base = p.filename().string();
  const fs::path dir = p.parent_path().empty() ? fs::path(".") : p.parent_path();
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    const pid_t pid = TemporaryOwner(name, base);
    if (pid <= 0 || pid == ::getpid()) continue;
    if (::kill(pid, 0) == 0 || errno != ESRCH) continue;  // running (or not ours to ask)
    const std::string tmp = (p.parent_path().empty() ? fs::path(name) : p.parent_path() / name);
    ScopedFd fd(::open(tmp.c_str(), O_RDWR | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK));
    struct stat st;
    if (fd.get() < 0 || ::fstat(fd.get(), &st) != 0 || !S_ISREG(st.st_mode)) continue;
    if (st.st_uid != ::geteuid() && ::geteuid() != 0) continue;
    if (!LockWhole(fd.get())) continue;  // in use, or the file system cannot tell
    if (::unlink(tmp.c_str()) == 0) {
      removed.push_back(tmp + " (left by process " + std::to_string(pid) + ", " +
                        std::to_string(st.st_size) + " bytes)");
    }
  }
  return removed;
}

}  // namespace

class VolumeBuilder::Impl {
 public:
  // One output file: a buffered append-only writer over its temporary file.
  // Bytes [buf_start, buf_start + buf.size()) are not yet in the file.
  struct TargetFile {
    std::string path;         // final name
    std::string stored_path;  // as recorded in target 0's table ("" for target 0)
    std::string temp_path;
    int fd = -1;
    std::vector<std::byte> buf;
    uint64_t buf_start = format::kSuperblockSize;
    bool published = false;  // renamed to `path` by this Finish
    // An NBD export written in place (docs/format.md §6.1): no temporary
    // name, fd -1; its primary superblock is written last.
    std::unique_ptr<nbd::Connection> remote;

    uint64_t Tell() const { return buf_start + buf.size(); }
  };

  ~Impl() {
    for (TargetFile& t : targets_) {
      if (t.fd >= 0) ::close(t.fd);
      if (!finished_ && !t.temp_path.empty()) ::unlink(t.temp_path.c_str());
    }
  }

  std::string path_;
  Options options_;
  std::vector<TargetFile> targets_;  // target 0 is path_
  std::vector<std::string> removed_temporaries_;
  bool finished_ = false;
  bool closed_ = false;  // Finish ran (successfully or not)

  std::string names_;
  std::vector<PendingDir> dirs_{PendingDir{format::kNone, 0, 0}};
  std::unordered_map<std::string, uint32_t> dir_ids_{{"", 0}};
  std::vector<PendingSample> samples_;
  std::vector<std::string> class_names_;
  uint64_t data_bytes_ = 0;
  uint32_t max_label_plus_one_ = 0;

  bool in_sample_ = false;
  PendingSample cur_{};

  // Fields (format v2). Every finished sample has its fields here, in
  // storage order (TreeSample::first_field/field_count); field ids are
  // provisional (order of first use) until Finish sorts the names.
  std::vector<format::TreeField> fields_;
  std::vector<std::string> field_names_;
  std::unordered_map<std::string, uint32_t> field_ids_;
  bool in_field_ = false;
  bool implicit_field_ = false;  // opened by a plain Append
  format::TreeField cur_field_{};
  std::vector<std::byte> field_buf_;  // the open field's raw bytes, when compressing
  std::shared_ptr<const format::ZstdDictionary> dict_;
  bool dict_used_ = false;

  // Dictionary training (Compression::train_dictionary). While training_,
  // finished samples are in samples_ (paths, labels and counts work as
  // usual) but not written: held_[k] is the raw bytes of fields_[k] (every
  // field so far: training starts with the first sample). TrainAndWrite
  // trains on them and writes the held samples in order.
  bool training_ = false;
  std::vector<std::vector<std::byte>> held_;
  uint64_t held_bytes_ = 0;

  // Writes stored bytes of sample `s` (and of its field `f`, if any) to its
  // target.
  Status WriteBytes(PendingSample& s, format::TreeField* f, std::span<const std::byte> data) {
    if (data.size() > uint64_t{0xFFFFFFFFu} - s.length) {
      return Status::InvalidArgument("sample larger than 4 GiB - 1 bytes");
    }
    s.crc32c = crc32c::Extend(s.crc32c, data.data(), data.size());
    s.length += static_cast<uint32_t>(data.size());
    if (f != nullptr) {
      f->crc32c = crc32c::Extend(f->crc32c, data.data(), data.size());
      f->stored_length += static_cast<uint32_t>(data.size());
    }
    return Write(targets_[s.target], data);
  }

  // Writes stored bytes of the open sample (and field).
  Status WriteSampleBytes(std::span<const std::byte> data) {
    return WriteBytes(cur_, in_field_ ? &cur_field_ : nullptr, data);
  }

  // Stores field `f` of sample `s` from its raw bytes: compressed (with the
  // dictionary, if any) when that saves at least min_saving, else raw.
  Status StoreField(PendingSample& s, format::TreeField& f, std::span<const std::byte> raw) {
    f.decoded_length = static_cast<uint32_t>(raw.size());
    std::vector<std::byte> packed;
    if (!raw.empty()) {
      DLFS_ASSIGN_OR_RETURN(packed,
                            format::ZstdCompress(raw, options_.compress.level, dict_.get()));
    }
    const double limit = static_cast<double>(raw.size()) * (1.0 - options_.compress.min_saving);
    if (!raw.empty() && static_cast<double>(packed.size()) <= limit) {
      f.codec =
          static_cast<uint8_t>(dict_ ? format::FieldCodec::kZstdDict : format::FieldCodec::kZstd);
      dict_used_ = dict_used_ || dict_ != nullptr;
      return WriteBytes(s, &f, packed);
    }
    return WriteBytes(s, &f, raw);
  }

  // Ends training: trains the dictionary on the held fields, then places
  // and writes every held sample in the order added.
  Status TrainAndWrite() {
    const uint64_t total = held_bytes_;
    const size_t capacity = std::max<size_t>(
        1024, std::min<size_t>(options_.compress.dictionary_max_bytes, total / 10));
    auto dict = format::TrainZstdDictionary(held_, capacity);
    if (!dict.ok()) {
      return Status::InvalidArgument(path_ + ": cannot train a zstd dictionary on the first " +
                                     std::to_string(held_.size()) + " fields (" +
                                     std::to_string(total) + " bytes): " + dict.status().message() +
                                     "; compress without a dictionary");
    }
    DLFS_ASSIGN_OR_RETURN(dict_, format::ZstdDictionary::Create(*dict, options_.compress.level));
    options_.compress.dictionary = std::move(*dict);
    training_ = false;
    for (PendingSample& s : samples_) {
      s.target = PickTarget();
      TargetFile& tf = targets_[s.target];
      DLFS_RETURN_IF_ERROR(Pad(tf, options_.align));
      s.offset = tf.Tell();
      for (uint64_t k = s.first_field; k < s.first_field + s.field_count; ++k) {
        DLFS_RETURN_IF_ERROR(StoreField(s, fields_[k], held_[k]));
        std::vector<std::byte>().swap(held_[k]);
      }
      data_bytes_ += s.length;
    }
    std::vector<std::vector<std::byte>>().swap(held_);
    held_bytes_ = 0;
    return Status::Ok();
  }

  // The paths added so far, so that a duplicate is refused when it is added
  // rather than at Finish: an open-addressed table of sample numbers keyed
  // by (directory, name), at most half full (4-byte slots: 8 to 16 bytes per
  // sample); the names are those in names_.
  std::vector<uint32_t> path_slots_;
  // Where samples came from, for messages: (first sample number, source).
  std::vector<std::pair<uint64_t, std::string>> sources_;

  std::string_view NameOf(const PendingSample& s) const {
    return std::string_view(names_).substr(s.name_offset, s.name_length);
  }

  static uint64_t PathHash(uint32_t dir, std::string_view name) {
    const uint64_t h = std::hash<std::string_view>{}(name);
    return h ^ ((uint64_t{dir} + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull);
  }

  // The slot holding the sample at (dir, name), or the empty slot where it
  // would go. REQUIRES: path_slots_ is not empty.
  size_t Probe(uint32_t dir, std::string_view name) const {
    const size_t mask = path_slots_.size() - 1;
    for (size_t i = PathHash(dir, name) & mask;; i = (i + 1) & mask) {
      const uint32_t n = path_slots_[i];
      if (n == kEmptySlot || (samples_[n].dir == dir && NameOf(samples_[n]) == name)) return i;
    }
  }

  // The sample already added at (dir, name), if any.
  std::optional<uint32_t> FindSample(uint32_t dir, std::string_view name) const {
    if (path_slots_.empty()) return std::nullopt;
    const uint32_t n = path_slots_[Probe(dir, name)];
    if (n == kEmptySlot) return std::nullopt;
    return n;
  }

  // Enters the last added sample into the table, growing it first when it
  // would become more than half full.
  void IndexLastSample() {
    const size_t n = samples_.size();
    if (2 * n > path_slots_.size()) {
      path_slots_.assign(std::max(kMinPathSlots, std::bit_ceil(2 * n)), kEmptySlot);
      for (size_t i = 0; i + 1 < n; ++i) {
        path_slots_[Probe(samples_[i].dir, NameOf(samples_[i]))] = static_cast<uint32_t>(i);
      }
    }
    path_slots_[Probe(samples_[n - 1].dir, NameOf(samples_[n - 1]))] = static_cast<uint32_t>(n - 1);
  }

  // "sample #12" or "sample #12 from shard-000.tar".
  std::string DescribeSample(uint64_t n) const {
    std::string out = "sample #" + std::to_string(n);
    auto it = std::upper_bound(sources_.begin(), sources_.end(), n,
                               [](uint64_t v, const auto& s) { return v < s.first; });
    if (it != sources_.begin() && !std::prev(it)->second.empty()) {
      out += " from " + std::prev(it)->second;
    }
    return out;
  }

  Status Flush(TargetFile& t) {
    if (t.buf.empty()) return Status::Ok();
    DLFS_RETURN_IF_ERROR(
        t.remote ? t.remote->Write(t.buf.data(), t.buf.size(), t.buf_start, t.path)
                 : PwriteFull(t.fd, t.buf.data(), t.buf.size(), t.buf_start, t.temp_path));
    t.buf_start += t.buf.size();
    t.buf.clear();
    return Status::Ok();
  }

  Status Write(TargetFile& t, std::span<const std::byte> data) {
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

  // Moves the logical end back to `pos` (dropping a half-written sample).
  static void Rewind(TargetFile& t, uint64_t pos) {
    if (pos >= t.buf_start) {
      t.buf.resize(pos - t.buf_start);
    } else {
      t.buf.clear();
      t.buf_start = pos;
    }
  }

  Status Pad(TargetFile& t, uint64_t align) {
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
  uint32_t PickTarget() const {
    uint32_t best = 0;
    for (uint32_t t = 1; t < targets_.size(); ++t) {
      if (targets_[t].Tell() < targets_[best].Tell()) best = t;
    }
    return best;
  }

  Result<uint32_t> DirId(std::string_view dir_path, std::string_view full) {
    auto it = dir_ids_.find(std::string(dir_path));
    if (it != dir_ids_.end()) return it->second;
    const size_t slash = dir_path.rfind('/');
    const std::string_view parent_path =
        slash == dir_path.npos ? std::string_view() : dir_path.substr(0, slash);
    const std::string_view name = slash == dir_path.npos ? dir_path : dir_path.substr(slash + 1);
    DLFS_RETURN_IF_ERROR(ValidateComponent(name, full));
    DLFS_ASSIGN_OR_RETURN(const uint32_t parent, DirId(parent_path, full));
    if (const auto sample = FindSample(parent, name)) {
      return Status::InvalidArgument("sample path '" + std::string(full) + "' needs directory '" +
                                     std::string(dir_path) + "', which was already added as " +
                                     DescribeSample(*sample));
    }
    if (dirs_.size() >= format::kNone - 1) return Status::InvalidArgument("too many directories");
    const uint32_t id = static_cast<uint32_t>(dirs_.size());
    dirs_.push_back(PendingDir{parent, names_.size(), static_cast<uint32_t>(name.size())});
    names_.append(name);
    dir_ids_.emplace(std::string(dir_path), id);
    return id;
  }

  uint64_t class_count() const;

  // ---- Finish, step by step ----

  // Where Finish places the regions. A target's data region is
  // [kDataOffset, data_end[t]); the directory region is target 0's
  // [dir_offset, dir_offset + dir_length).
  struct Layout {
    static constexpr uint64_t kDataOffset = format::kSuperblockSize;
    std::vector<uint64_t> data_end;  // per target
    uint64_t dir_offset = 0;
    uint64_t dir_length = 0;
    uint32_t dir_crc32c = 0;
  };

  // Runs the steps below in order; the first failure is returned.
  Status Finish();
  // Ends every target's data region: pads it to the region boundary and
  // flushes it. Returns the data extents and where the directory goes.
  Result<Layout> EndDataRegions();
  // The samples, directories and class names added so far, as the codec's
  // tree (borrowing this builder's entries).
  format::DirectoryTree Tree();
  // The superblock's incompat flags for `tree` (docs/format.md §2.5).
  uint32_t IncompatFlags(const format::DirectoryTree& tree) const;
  uint32_t incompat_flags_ = 0;
  // Encodes `tree` in `order` and appends the region to target 0 at
  // layout->dir_offset, padded and flushed; records its length and CRC.
  Status WriteDirectory(const format::DirectoryTree& tree, const format::DirectoryOrder& order,
                        Layout* layout);
  // The volume-wide superblock for `layout` (fresh uuid and time, counts,
  // region and target tables); target_index, volume_size and the CRC are
  // left for Seal.
  Result<format::Superblock> Describe(const Layout& layout) const;
  // Gives each target its own sealed copy of `sb` at both ends, truncates it
  // to its size and makes it durable. Nothing is published yet.
  Status Seal(const format::Superblock& sb);
  // Renames every sealed target to its path (RenameAll) and syncs the
  // directories holding them.
  Status Publish();

  // Zeroes an export's primary superblock and flushes: from then on it
  // holds no valid target, whatever the rest of it holds.
  static Status Invalidate(TargetFile& t) {
    static const std::byte kZeros[format::kSuperblockSize] = {};
    DLFS_RETURN_IF_ERROR(t.remote->Write(kZeros, sizeof kZeros, 0, t.path));
    return t.remote->Flush(t.path);
  }

  // Moves target `t`'s finished temporary file to its path, never replacing
  // an existing file unless overwrite was asked for.
  Status Rename(TargetFile& t) {
    if (t.remote) {  // sealed in place: its primary superblock made it a target
      t.published = true;
      return Status::Ok();
    }
    const auto exists = [&] {
      return Status::AlreadyExists(t.path + ": already exists (use --force to replace it)");
    };
    const std::string what = "rename " + t.temp_path + " to " + t.path;
    if (options_.overwrite) {
      if (::rename(t.temp_path.c_str(), t.path.c_str()) != 0) return Status::FromErrno(errno, what);
      t.published = true;
      return Status::Ok();
    }
    if (::renameat2(AT_FDCWD, t.temp_path.c_str(), AT_FDCWD, t.path.c_str(), RENAME_NOREPLACE) ==
        0) {
      t.published = true;
      return Status::Ok();
    }
    if (errno == EEXIST) return exists();
    if (errno != EINVAL && errno != ENOSYS) return Status::FromErrno(errno, what);
    // File systems without RENAME_NOREPLACE (some NFS and FUSE ones): link()
    // also fails rather than replace an existing name.
    if (::link(t.temp_path.c_str(), t.path.c_str()) != 0) {
      if (errno == EEXIST) return exists();
      return Status::FromErrno(errno, "link " + t.temp_path + " to " + t.path);
    }
    t.published = true;
    ::unlink(t.temp_path.c_str());
    return Status::Ok();
  }

  // Renames every target, target 0 last: target 0 is the only way into the
  // volume, so until its rename nothing that opens as a volume exists (a
  // lone target t > 0 is refused by readers). If a rename fails, the targets
  // already renamed are removed again.
  Status RenameAll() {
    Status st;
    for (size_t t = targets_.size(); t-- > 0 && st.ok();) st = Rename(targets_[t]);
    if (st.ok()) return st;
    for (TargetFile& t : targets_) {
      if (t.published && t.remote) {
        (void)Invalidate(t);
      } else if (t.published) {
        ::unlink(t.path.c_str());
      }
      t.published = false;
    }
    return st;
  }
};

VolumeBuilder::VolumeBuilder(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

VolumeBuilder::~VolumeBuilder() = default;

Result<std::unique_ptr<VolumeBuilder>> VolumeBuilder::Create(const std::string& path,
                                                             Options options) {
  const uint32_t a = options.align;
  if (a == 0 || (a & (a - 1)) != 0 || a > format::kMaxDataAlignment) {
    return Status::InvalidArgument("alignment must be a power of two from 1 to 1 MiB, not " +
                                   std::to_string(a));
  }
  if (path.empty()) return Status::InvalidArgument("empty volume path");
  if (options.targets == 0 || options.targets > format::kMaxTargets) {
    return Status::InvalidArgument("a volume has 1 to " + std::to_string(format::kMaxTargets) +
                                   " targets, not " + std::to_string(options.targets));
  }
  if (!options.target_paths.empty() && options.target_paths.size() != options.targets - 1) {
    return Status::InvalidArgument(std::to_string(options.targets) + " targets need " +
                                   std::to_string(options.targets - 1) + " target paths, not " +
                                   std::to_string(options.target_paths.size()));
  }
  auto impl = std::make_unique<Impl>();
  if (options.compress.train_dictionary) {
    if (!options.compress.zstd) {
      return Status::InvalidArgument("training a zstd dictionary needs zstd compression");
    }
    if (!options.compress.dictionary.empty()) {
      return Status::InvalidArgument("give a zstd dictionary or train one, not both");
    }
    impl->training_ = true;
  }
  if (!options.compress.dictionary.empty()) {
    if (!options.compress.zstd) {
      return Status::InvalidArgument("a zstd dictionary needs zstd compression");
    }
    DLFS_ASSIGN_OR_RETURN(impl->dict_, format::ZstdDictionary::Create(options.compress.dictionary,
                                                                      options.compress.level));
  }
  if (options.compress.min_saving < 0 || options.compress.min_saving >= 1) {
    return Status::InvalidArgument("compression's minimum saving must be in [0, 1)");
  }
  impl->path_ = path;
  impl->options_ = options;
  impl->targets_.resize(options.targets);
  std::set<std::string> seen;
  for (uint32_t t = 0; t < options.targets; ++t) {
    Impl::TargetFile& tf = impl->targets_[t];
    tf.path = t == 0                         ? path
              : options.target_paths.empty() ? DefaultTargetPath(path, t)
                                             : options.target_paths[t - 1];
    if (tf.path.empty()) return Status::InvalidArgument("empty target path");
    if (t == 0 && IsNbdUri(tf.path)) {
      return Status::InvalidArgument(tf.path +
                                     ": target 0 names the volume and must be a file; write "
                                     "targets 1, 2, ... to NBD exports (--target-path)");
    }
    if (t > 0 && IsNbdUri(tf.path)) {
      // Stored as given: a URI is not relative to anything.
      if (tf.path.size() > format::kMaxTargetPath) {
        return Status::InvalidArgument(tf.path + ": URI longer than " +
                                       std::to_string(format::kMaxTargetPath) + " bytes");
      }
      tf.stored_path = tf.path;
      if (!seen.insert(tf.path).second) {
        return Status::InvalidArgument(tf.path + ": named as two targets of the volume");
      }
      continue;
    }
    if (t > 0) {
      DLFS_ASSIGN_OR_RETURN(tf.stored_path, StoredTargetPath(path, tf.path));
    }
    std::error_code ec;
    if (!seen.insert(std::filesystem::absolute(tf.path, ec).lexically_normal().string()).second) {
      return Status::InvalidArgument(tf.path + ": named as two targets of the volume");
    }
  }
  // An early error only; the no-replace rename at Finish is what enforces it.
  for (const Impl::TargetFile& tf : impl->targets_) {
    if (IsNbdUri(tf.path)) continue;
    if (!options.overwrite && PathExists(tf.path)) {
      return Status::AlreadyExists(tf.path + ": already exists (use --force to replace it)");
    }
  }
  for (const Impl::TargetFile& tf : impl->targets_) {
    if (IsNbdUri(tf.path)) continue;
    for (std::string& r : RemoveStaleTemporaries(tf.path)) {
      impl->removed_temporaries_.push_back(std::move(r));
    }
  }
  static std::atomic<uint64_t> counter{0};
  for (Impl::TargetFile& tf : impl->targets_) {
    if (IsNbdUri(tf.path)) {
      DLFS_ASSIGN_OR_RETURN(tf.remote,
                            nbd::Connection::Open(tf.path, NbdOptions{}.timeout_seconds, true));
      format::Superblock old{};
      if (tf.remote->size() >= sizeof old) {
        DLFS_RETURN_IF_ERROR(tf.remote->Read(&old, sizeof old, 0, tf.path));
      }
      if (!options.overwrite && std::memcmp(old.magic, format::kSuperblockMagic, 8) == 0) {
        return Status::AlreadyExists(tf.path +
                                     ": holds a dlfs target already (use --force to replace it)");
      }
      // Whatever was there stops being a target before any byte changes.
      DLFS_RETURN_IF_ERROR(Impl::Invalidate(tf));
      continue;
    }
    for (int attempt = 0; attempt < 100; ++attempt) {
      std::string tmp = tf.path + ".tmp." + std::to_string(::getpid()) + "." +
                        std::to_string(counter.fetch_add(1));
      // O_RDWR: the lock below needs a descriptor open for writing.
      const int fd = ::open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
      if (fd >= 0) {
        // Held while the builder lives: RemoveStaleTemporaries in another
        // process leaves this file alone, even if it cannot see our pid.
        (void)LockWhole(fd);
        tf.fd = fd;
        tf.temp_path = std::move(tmp);
        break;
      }
      if (errno != EEXIST) return Status::FromErrno(errno, tmp);  // ~Impl removes the others
    }
    if (tf.fd < 0) return Status::AlreadyExists(tf.path + ": cannot pick a temporary file name");
  }
  return std::unique_ptr<VolumeBuilder>(new VolumeBuilder(std::move(impl)));
}

std::string VolumeBuilder::DefaultTargetPath(const std::string& path, uint32_t target) {
  return target == 0 ? path : path + ".t" + std::to_string(target);
}

void VolumeBuilder::SetClassNames(std::vector<std::string> names) {
  impl_->class_names_ = std::move(names);
}

void VolumeBuilder::SetSourceName(std::string name) {
  auto& sources = impl_->sources_;
  const uint64_t first = impl_->samples_.size();
  if (!sources.empty() && sources.back().first == first) {
    sources.back().second = std::move(name);
  } else {
    sources.emplace_back(first, std::move(name));
  }
}

Status VolumeBuilder::Add(std::string_view path, std::span<const std::byte> data, uint32_t label) {
  DLFS_RETURN_IF_ERROR(BeginSample(path, label));
  Status st = Append(data);
  if (!st.ok()) {
    AbortSample();
    return st;
  }
  return EndSample();
}

Status VolumeBuilder::BeginSample(std::string_view path, uint32_t label) {
  Impl& m = *impl_;
  if (m.closed_) return Status::InvalidArgument("builder already finished");
  if (m.in_sample_) return Status::InvalidArgument("BeginSample while a sample is open");
  if (label == format::kNone - 1) return Status::InvalidArgument("label out of range");
  // Components are checked below; a leading '/' would otherwise vanish with
  // the empty component before it ("/etc/x" stored as "etc/x").
  if (path.starts_with('/')) {
    return Status::InvalidArgument("bad sample path '" + std::string(path) +
                                   "': absolute (paths in a volume are relative)");
  }
  const size_t slash = path.rfind('/');
  const std::string_view dir = slash == path.npos ? std::string_view() : path.substr(0, slash);
  const std::string_view name = slash == path.npos ? path : path.substr(slash + 1);
  DLFS_RETURN_IF_ERROR(ValidateComponent(name, path));
  if (m.dir_ids_.contains(std::string(path))) {
    return Status::InvalidArgument("sample path '" + std::string(path) +
                                   "' is already a directory of the volume");
  }
  DLFS_ASSIGN_OR_RETURN(const uint32_t dir_id, m.DirId(dir, path));
  if (const auto earlier = m.FindSample(dir_id, name)) {
    return Status::InvalidArgument("duplicate sample path '" + std::string(path) +
                                   "' (already added as " + m.DescribeSample(*earlier) + ")");
  }
  if (m.samples_.size() >= format::kNone - 1) return Status::InvalidArgument("too many samples");
  // A sample held for dictionary training is placed when it is written.
  const uint32_t target = m.training_ ? 0 : m.PickTarget();
  Impl::TargetFile& tf = m.targets_[target];
  if (!m.training_) DLFS_RETURN_IF_ERROR(m.Pad(tf, m.options_.align));
  m.cur_ = PendingSample{m.training_ ? 0 : tf.Tell(),
                         target,
                         0,
                         0,
                         label,
                         dir_id,
                         m.names_.size(),
                         static_cast<uint32_t>(name.size()),
                         0,
                         m.fields_.size()};
  m.names_.append(name);
  m.in_sample_ = true;
  return Status::Ok();
}

Status VolumeBuilder::Append(std::span<const std::byte> data) {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("Append without BeginSample");
  if (!m.in_field_) {
    if (m.cur_.field_count != 0) {
      return Status::InvalidArgument("Append outside a field of a sample that has fields");
    }
    DLFS_RETURN_IF_ERROR(BeginField(""));
    m.implicit_field_ = true;
  }
  if (m.options_.compress.zstd) {
    if (data.size() > uint64_t{0xFFFFFFFFu} - m.field_buf_.size()) {
      return Status::InvalidArgument("field larger than 4 GiB - 1 bytes");
    }
    m.field_buf_.insert(m.field_buf_.end(), data.begin(), data.end());
    return Status::Ok();
  }
  DLFS_RETURN_IF_ERROR(m.WriteSampleBytes(data));
  m.cur_field_.decoded_length = m.cur_field_.stored_length;
  return Status::Ok();
}

Status VolumeBuilder::BeginField(std::string_view name) {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("BeginField without BeginSample");
  if (m.in_field_) return Status::InvalidArgument("BeginField while a field is open");
  if (name.size() > 0xFFFF || name.find('/') != name.npos || name.find('\0') != name.npos) {
    return Status::InvalidArgument("bad field name '" + std::string(name.substr(0, 80)) +
                                   "' (at most 65535 bytes, no '/' or NUL)");
  }
  auto [it, fresh] =
      m.field_ids_.try_emplace(std::string(name), static_cast<uint32_t>(m.field_names_.size()));
  if (fresh) {
    if (m.field_names_.size() >= format::kMaxFields) {
      m.field_ids_.erase(it);
      return Status::InvalidArgument("more than 65535 field names in one volume");
    }
    m.field_names_.emplace_back(name);
  }
  for (uint64_t k = m.cur_.first_field; k < m.fields_.size(); ++k) {
    if (m.fields_[k].field == it->second) {
      return Status::InvalidArgument("field '" + std::string(name) + "' added twice to one sample");
    }
  }
  m.in_field_ = true;
  m.implicit_field_ = false;
  m.cur_field_ = format::TreeField{it->second, 0, 0, 0, 0};
  m.field_buf_.clear();
  return Status::Ok();
}

Status VolumeBuilder::EndField() {
  Impl& m = *impl_;
  if (!m.in_field_) return Status::InvalidArgument("EndField without BeginField");
  if (m.training_) {
    // Held raw until the dictionary is trained (TrainAndWrite).
    m.cur_field_.decoded_length = static_cast<uint32_t>(m.field_buf_.size());
    m.held_bytes_ += m.field_buf_.size();
    m.held_.push_back(std::move(m.field_buf_));
    m.field_buf_.clear();
  } else if (m.options_.compress.zstd) {
    const std::vector<std::byte> raw = std::move(m.field_buf_);
    m.field_buf_.clear();
    DLFS_RETURN_IF_ERROR(m.StoreField(m.cur_, m.cur_field_, raw));
  }
  m.in_field_ = false;
  m.implicit_field_ = false;
  m.fields_.push_back(m.cur_field_);
  ++m.cur_.field_count;
  return Status::Ok();
}

Status VolumeBuilder::AddField(std::string_view name, std::span<const std::byte> data) {
  DLFS_RETURN_IF_ERROR(BeginField(name));
  DLFS_RETURN_IF_ERROR(Append(data));
  return EndField();
}

Status ParseCompression(std::string_view spec, bool train_dictionary,
                        VolumeBuilder::Options::Compression* out) {
  VolumeBuilder::Options::Compression c = *out;
  const size_t colon = spec.find(':');
  if (spec.empty() || spec == "none") {
    c.zstd = false;
  } else if (spec.substr(0, colon) == "zstd") {
    c.zstd = true;
    if (colon != spec.npos) {
      int level = 0;
      const auto [end, ec] =
          std::from_chars(spec.data() + colon + 1, spec.data() + spec.size(), level);
      if (ec != std::errc() || end != spec.data() + spec.size() || level < 1 || level > 22) {
        return Status::InvalidArgument("compression '" + std::string(spec) +
                                       "': the zstd level is 1..22");
      }
      c.level = level;
    }
  } else {
    return Status::InvalidArgument("compression '" + std::string(spec) +
                                   "': only zstd[:LEVEL] (or none) is supported");
  }
  if (train_dictionary && !c.zstd) {
    return Status::InvalidArgument("a trained dictionary needs zstd compression");
  }
  c.train_dictionary = train_dictionary;
  *out = std::move(c);
  return Status::Ok();
}

Result<std::vector<std::byte>> VolumeBuilder::TrainDictionary(
    const std::vector<std::vector<std::byte>>& samples, size_t max_bytes) {
  return format::TrainZstdDictionary(samples, max_bytes);
}

Status VolumeBuilder::EndSample() {
  Impl& m = *impl_;
  if (!m.in_sample_) return Status::InvalidArgument("EndSample without BeginSample");
  if (m.in_field_ && !m.implicit_field_) {
    return Status::InvalidArgument("EndSample with a field still open");
  }
  if (m.in_field_) DLFS_RETURN_IF_ERROR(EndField());
  // A sample given no bytes at all is one empty unnamed field, like v1's
  // empty sample.
  if (m.cur_.field_count == 0) DLFS_RETURN_IF_ERROR(AddField("", {}));
  m.in_sample_ = false;
  m.samples_.push_back(m.cur_);
  m.IndexLastSample();
  m.data_bytes_ += m.cur_.length;
  if (m.cur_.label != format::kNone) {
    m.max_label_plus_one_ = std::max(m.max_label_plus_one_, m.cur_.label + 1);
  }
  if (m.training_ && (m.held_bytes_ >= m.options_.compress.training_bytes ||
                      m.held_.size() >= m.options_.compress.training_fields)) {
    return m.TrainAndWrite();
  }
  return Status::Ok();
}

void VolumeBuilder::AbortSample() {
  Impl& m = *impl_;
  if (!m.in_sample_) return;
  m.in_sample_ = false;
  m.in_field_ = false;
  m.implicit_field_ = false;
  m.field_buf_.clear();
  m.fields_.resize(m.cur_.first_field);
  m.names_.resize(m.cur_.name_offset);
  if (m.training_) {
    for (size_t k = m.cur_.first_field; k < m.held_.size(); ++k) m.held_bytes_ -= m.held_[k].size();
    m.held_.resize(m.cur_.first_field);
  } else {
    Impl::Rewind(m.targets_[m.cur_.target], m.cur_.offset);
  }
}

Status VolumeBuilder::SetLabel(uint64_t n, uint32_t label) {
  Impl& m = *impl_;
  if (m.closed_) return Status::InvalidArgument("builder already finished");
  if (n >= m.samples_.size()) {
    return Status::InvalidArgument("SetLabel: no sample " + std::to_string(n) + " (" +
                                   std::to_string(m.samples_.size()) + " added)");
  }
  if (label == format::kNone - 1) return Status::InvalidArgument("label out of range");
  m.samples_[n].label = label;
  // Not lowered when a label is replaced: class_count() never shrinks.
  if (label != format::kNone) m.max_label_plus_one_ = std::max(m.max_label_plus_one_, label + 1);
  return Status::Ok();
}

Status VolumeBuilder::Finish() {
  Impl& m = *impl_;
  if (m.closed_) return Status::InvalidArgument("builder already finished");
  Status st = m.Finish();
  m.closed_ = true;
  m.finished_ = st.ok();
  for (Impl::TargetFile& t : m.targets_) {
    if (t.fd >= 0) ::close(t.fd);
    t.fd = -1;
    if (!st.ok() && !t.temp_path.empty()) ::unlink(t.temp_path.c_str());
  }
  return st;
}

// Finish in steps, each leaving the temporary files as the next expects.
// Any failure leaves no published file: VolumeBuilder::Finish then removes
// the temporary files.
Status VolumeBuilder::Impl::Finish() {
  if (in_sample_) return Status::InvalidArgument("Finish with a sample still open");
  // A volume smaller than the training set: trained on all of it.
  if (training_ && !samples_.empty()) DLFS_RETURN_IF_ERROR(TrainAndWrite());
  DLFS_ASSIGN_OR_RETURN(Layout layout, EndDataRegions());
  // Order: the canonical order, refusing paths no directory can hold.
  const format::DirectoryTree tree = Tree();
  incompat_flags_ = IncompatFlags(tree);
  DLFS_ASSIGN_OR_RETURN(const format::DirectoryOrder order, format::OrderDirectory(tree));
  // Encode: the directory region, after target 0's data.
  DLFS_RETURN_IF_ERROR(WriteDirectory(tree, order, &layout));
  // Seal: every target complete and durable under its temporary name ...
  DLFS_ASSIGN_OR_RETURN(const format::Superblock sb, Describe(layout));
  DLFS_RETURN_IF_ERROR(Seal(sb));
  // ... before any of them is published.
  return Publish();
}

Result<VolumeBuilder::Impl::Layout> VolumeBuilder::Impl::EndDataRegions() {
  // Every target's data region runs from 4096 to the end of its last sample;
  // target 0's directory region follows its data, on the next 4096 boundary.
  Layout layout;
  for (TargetFile& t : targets_) {
    layout.data_end.push_back(t.Tell());
    DLFS_RETURN_IF_ERROR(Pad(t, format::kRegionAlignment));
    DLFS_RETURN_IF_ERROR(Flush(t));
  }
  layout.dir_offset = targets_[0].Tell();
  return layout;
}

format::DirectoryTree VolumeBuilder::Impl::Tree() {
  format::DirectoryTree tree{names_, dirs_, samples_, class_names_, class_count()};
  // A volume of whole raw samples (one unnamed raw field each) is format v1.
  bool v1 = field_names_.empty() || (field_names_.size() == 1 && field_names_[0].empty());
  for (const format::TreeField& f : fields_) v1 = v1 && f.codec == 0;
  for (const PendingSample& s : samples_) v1 = v1 && s.field_count == 1;
  if (v1) return tree;
  // Field ids become positions in the sorted name table (§4.8.2).
  std::vector<uint32_t> order(field_names_.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(),
            [&](uint32_t a, uint32_t b) { return field_names_[a] < field_names_[b]; });
  std::vector<uint32_t> new_id(order.size());
  std::vector<std::string> sorted;
  for (uint32_t k = 0; k < order.size(); ++k) {
    new_id[order[k]] = k;
    sorted.push_back(field_names_[order[k]]);
  }
  for (format::TreeField& f : fields_) f.field = new_id[f.field];
  field_names_ = std::move(sorted);
  field_ids_.clear();
  tree.with_fields = true;
  tree.field_names = field_names_;
  tree.fields = fields_;
  if (dict_used_) tree.dictionary = options_.compress.dictionary;
  return tree;
}

uint32_t VolumeBuilder::Impl::IncompatFlags(const format::DirectoryTree& tree) const {
  if (!tree.with_fields) return 0;
  uint32_t flags = format::kIncompatFields;
  for (const format::TreeField& f : fields_) {
    if (f.codec != 0) flags |= format::kIncompatZstd;
  }
  return flags;
}

Status VolumeBuilder::Impl::WriteDirectory(const format::DirectoryTree& tree,
                                           const format::DirectoryOrder& order, Layout* layout) {
  DLFS_ASSIGN_OR_RETURN(const std::vector<std::byte> region, format::EncodeDirectory(tree, order));
  layout->dir_length = region.size();
  layout->dir_crc32c = crc32c::Value(region.data(), region.size());
  TargetFile& target0 = targets_[0];
  DLFS_RETURN_IF_ERROR(Write(target0, region));
  DLFS_RETURN_IF_ERROR(Pad(target0, format::kRegionAlignment));
  return Flush(target0);
}

Result<format::Superblock> VolumeBuilder::Impl::Describe(const Layout& layout) const {
  // One superblock describes the whole volume; each target gets a copy that
  // differs only in target_index and volume_size (docs/format.md §2).
  format::Superblock sb{};
  if (::getrandom(sb.uuid, sizeof sb.uuid, 0) != sizeof sb.uuid) {
    return Status::FromErrno(errno, "getrandom");
  }
  sb.uuid[6] = (sb.uuid[6] & 0x0f) | 0x40;  // RFC 4122 version 4
  sb.uuid[8] = (sb.uuid[8] & 0x3f) | 0x80;
  sb.created_unix_ns =
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::chrono::system_clock::now().time_since_epoch())
                                .count());
  sb.incompat_flags = incompat_flags_;
  sb.sample_count = samples_.size();
  sb.dir_count = dirs_.size();
  sb.class_count = class_count();
  sb.data_bytes = data_bytes_;
  sb.data_alignment = options_.align;
  sb.target_count = static_cast<uint32_t>(targets_.size());
  // regions[0] = target 0's data, regions[1] = the directory (the layout of
  // single-target volumes), then the data regions of targets 1, 2, ...
  sb.region_count = 1 + sb.target_count;
  auto data_region = [&](uint32_t t) {
    return format::RegionEntry{
        static_cast<uint32_t>(format::RegionKind::kData), t, Layout::kDataOffset,
        layout.data_end[t] - Layout::kDataOffset,         0, 0};
  };
  sb.regions[0] = data_region(0);
  sb.regions[1] = {static_cast<uint32_t>(format::RegionKind::kDirectory),
                   0,
                   layout.dir_offset,
                   layout.dir_length,
                   layout.dir_crc32c,
                   0};
  for (uint32_t t = 1; t < sb.target_count; ++t) sb.regions[1 + t] = data_region(t);
  for (uint32_t t = 0; t < sb.target_count; ++t) {
    format::TargetEntry& e = sb.targets[t];
    e.size = targets_[t].Tell() + format::kSuperblockSize;
    e.path_length = static_cast<uint32_t>(targets_[t].stored_path.size());
    std::memcpy(e.path, targets_[t].stored_path.data(), e.path_length);
  }
  return sb;
}

Status VolumeBuilder::Impl::Seal(const format::Superblock& sb) {
  for (uint32_t t = 0; t < sb.target_count; ++t) {
    TargetFile& tf = targets_[t];
    format::Superblock own = sb;
    own.target_index = t;
    own.volume_size = sb.targets[t].size;
    format::SealSuperblock(&own);
    if (tf.remote) {
      // An export cannot be renamed: the data, then the copy at the end,
      // each flushed, and the primary superblock last (format.md §6.1).
      if (tf.remote->size() < own.volume_size) {
        return Status::InvalidArgument(
            tf.path + ": export has " + std::to_string(tf.remote->size()) + " bytes, target " +
            std::to_string(t) + " needs " + std::to_string(own.volume_size));
      }
      DLFS_RETURN_IF_ERROR(tf.remote->Flush(tf.path));
      DLFS_RETURN_IF_ERROR(
          tf.remote->Write(&own, sizeof own, own.volume_size - sizeof own, tf.path));
      DLFS_RETURN_IF_ERROR(tf.remote->Flush(tf.path));
      DLFS_RETURN_IF_ERROR(tf.remote->Write(&own, sizeof own, 0, tf.path));
      DLFS_RETURN_IF_ERROR(tf.remote->Flush(tf.path));
      continue;
    }
    // Drop anything an aborted sample left past the end and make everything
    // else durable before the primary superblock: a file whose primary is
    // valid then has all of its bytes on disk, even before the rename.
    if (::ftruncate(tf.fd, static_cast<off_t>(own.volume_size)) != 0) {
      return Status::FromErrno(errno, tf.temp_path + ": ftruncate");
    }
    DLFS_RETURN_IF_ERROR(
        PwriteFull(tf.fd, &own, sizeof own, own.volume_size - sizeof own, tf.temp_path));
    if (::fdatasync(tf.fd) != 0) return Status::FromErrno(errno, tf.temp_path + ": fdatasync");
    DLFS_RETURN_IF_ERROR(PwriteFull(tf.fd, &own, sizeof own, 0, tf.temp_path));
    if (::fsync(tf.fd) != 0) return Status::FromErrno(errno, tf.temp_path + ": fsync");
  }
  return Status::Ok();
}

Status VolumeBuilder::Impl::Publish() {
  DLFS_RETURN_IF_ERROR(RenameAll());
  for (size_t t = targets_.size(); t-- > 0;) {
    if (targets_[t].remote) continue;
    DLFS_RETURN_IF_ERROR(SyncParentDirectory(targets_[t].path));
  }
  return Status::Ok();
}

uint64_t VolumeBuilder::Impl::class_count() const {
  return std::max<uint64_t>(class_names_.size(), max_label_plus_one_);
}

uint64_t VolumeBuilder::sample_count() const { return impl_->samples_.size(); }
uint64_t VolumeBuilder::data_bytes() const { return impl_->data_bytes_; }
uint64_t VolumeBuilder::dictionary_bytes() const {
  return impl_->options_.compress.dictionary.size();
}
uint64_t VolumeBuilder::class_count() const { return impl_->class_count(); }
const std::string& VolumeBuilder::path() const { return impl_->path_; }
const std::string& VolumeBuilder::temp_path() const { return impl_->targets_[0].temp_path; }
const std::vector<std::string>& VolumeBuilder::removed_temporaries() const {
  return impl_->removed_temporaries_;
}
std::vector<std::string> VolumeBuilder::target_paths() const {
  std::vector<std::string> out;
  for (const Impl::TargetFile& t : impl_->targets_) out.push_back(t.path);
  return out;
}
std::vector<std::string> VolumeBuilder::temp_paths() const {
  std::vector<std::string> out;
  for (const Impl::TargetFile& t : impl_->targets_) out.push_back(t.temp_path);
  return out;
}

}  // namespace dlfs
