// Volume: an open dlfs volume — its superblock, its sample directory, and
// plain (pread) access to sample bytes.
//
// Start here. A volume is one or more target files (or block devices) written
// by `dlfs pack` or VolumeBuilder; docs/format.md specifies it. Target 0 names
// the volume: it holds the directory and the paths of the other targets.
// Open() reads target 0's superblock and the whole directory region in one
// read each, opens and checks every other target's superblock, verifies the
// checksums and the directory's structure, and refuses anything it does not
// fully understand with a Status naming the file and the problem.
//
// Reading samples here is the simple path (one pread per sample) used by the
// CLI, tests and importers; the batch loader (dlfs/loader.h) is the fast one.
//
// Thread safety: after Open(), every const method may be called from any
// number of threads concurrently, and Close() may be called while they run.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/enum_names.h"
#include "dlfs/nbd.h"
#include "dlfs/status.h"
#include "dlfs/target_kind.h"  // TargetKind

namespace dlfs {

namespace io_internal {
class Target;
}

// One target of an open volume.
struct TargetInfo {
  std::string path;          // the file opened (after resolution and remapping)
  std::string stored_path;   // as recorded in target 0's table; empty for target 0
  uint64_t size = 0;         // bytes of the target file
  uint64_t data_offset = 0;  // its data region
  uint64_t data_length = 0;
  TargetKind kind = TargetKind::kFile;  // kNotOpen: not opened here (open_only)
};

struct VolumeInfo {
  uint32_t format_version = 0;
  std::string uuid;  // 8-4-4-4-12 hex
  uint64_t created_unix_ns = 0;
  uint64_t volume_size = 0;  // bytes of target 0 (the file holding the directory)
  uint64_t sample_count = 0;
  uint64_t dir_count = 0;
  uint64_t class_count = 0;
  uint64_t data_bytes = 0;   // sum of sample lengths
  uint64_t data_offset = 0;  // target 0's data region
  uint64_t data_length = 0;  // data region bytes, alignment padding included
  uint64_t directory_offset = 0;
  uint64_t directory_bytes = 0;
  uint32_t data_alignment = 1;
  uint32_t incompat_flags = 0;  // format-v2 features: 0x1 fields, 0x2 zstd
  uint32_t compat_flags = 0;    // 0x1 images (an images section, docs/format.md §4.9)
  // Paths of the targets as opened, indexed by target id (what an IoEngine
  // is created with); target 0 is the path given to Open.
  std::vector<std::string> targets;
  std::vector<TargetInfo> target_details;  // same order
};

// A volume's metadata as stored: what an MPI collective open
// (dlfs/distributed.h) reads on one rank only and shares with the others.
struct VolumeMetadata {
  std::vector<std::vector<std::byte>> superblocks;  // each target's primary superblock
  std::shared_ptr<const std::byte> directory;       // the directory region
  uint64_t directory_bytes = 0;
  // True when these exact directory bytes already passed every check of
  // Volume::Open in this job (the collective open's rank 0 sets it before
  // sharing them): the checksum and per-entry rules are then not repeated,
  // only header and bounds checks. Never set it for bytes from elsewhere.
  bool directory_validated = false;
  // The node region `directory` lives in (a collective open's), or "":
  // what Volume::directory_region() then says.
  std::string directory_region;
  // A compact (format v3) directory mapped from target 0's file: each
  // process that opens the volume maps it itself (the page cache is the
  // node's one copy), so a collective open hands over only the superblocks.
  bool directory_mapped = false;
};

// Where a process keeps a volume's directory region (the sample directory:
// tens of bytes per sample) in memory.
enum class DirectorySharing : uint8_t {
  kPrivate,  // its own copy, read from storage
  // One copy per node and user: a region in /dev/shm ($DLFS_CACHE_DIR) that
  // every process opening the volume this way shares — the ranks of a job,
  // their DataLoader workers, other jobs. The first process of the node
  // reads the directory from storage while the others wait for it, then
  // each maps the copy read-only and checks it in full, as if it had read it
  // from storage. Regions are per user (mode 0600; another user's is
  // refused), reference-counted (the last process to close the volume
  // removes it; one left by a killed job is removed by the next open), and
  // follow the node cache's rules (src/common/shm_region.h).
  kNode,
};
inline constexpr EnumName<DirectorySharing> kDirectorySharingNames[] = {
    {DirectorySharing::kPrivate, "private"}, {DirectorySharing::kNode, "node"}};

struct VolumeOpenOptions {
  // Where to find target t instead of the path recorded in target 0's table,
  // e.g. {{1, "/dev/nvme1n1"}} when a namespace has a different device name
  // on this node. Keys must name targets 1 .. target count - 1 (target 0 is
  // the path given to Open). A mapped target is checked like any other.
  std::map<uint32_t, std::string> target_map;
  // When set, these bytes stand in for the superblocks and the directory
  // region: Open reads no metadata from storage (it still opens every
  // target and checks its size). They get every check bytes read from disk
  // get. The directory bytes are used in place, not copied: they must stay
  // valid and unchanged for the Volume's life.
  const VolumeMetadata* metadata = nullptr;
  // When non-empty, open only these targets (target 0, which holds the
  // directory, always): a node holding just its own shard never needs to
  // see the others. The others are described from target 0's table but not
  // opened or checked; reading one of their samples is Unavailable naming
  // the target. Ids the volume does not have are ignored. In `metadata`,
  // the superblocks of targets not opened by the sender may be empty; this
  // rank then reads its own targets' superblocks.
  std::vector<uint32_t> open_only;
  // Targets named by NBD URIs (dlfs/nbd.h): the timeout bounds connecting
  // and every metadata read (reconnects: one per read).
  NbdOptions nbd;
  // Where the directory is kept (see DirectorySharing). With kNode, when no
  // node copy can be used (no room in /dev/shm, a region refused), the
  // volume keeps a private copy and directory_note() says why. Ignored
  // when `metadata` is given.
  DirectorySharing directory_sharing = DirectorySharing::kPrivate;
  // With kNode: keeps fake nodes of one host apart (DLFS_RANKS_PER_NODE),
  // e.g. "-node1"; appended to the region's name.
  std::string node_name;
};

// Parses "1=/dev/nvme1n1,2=/data/v.dlfs.t2" (the CLI's --target-map) into a
// map. InvalidArgument for a malformed entry or a target id given twice.
// Paths cannot contain ','; use VolumeOpenOptions directly for such names.
Result<std::map<uint32_t, std::string>> ParseTargetMap(std::string_view spec);

class Volume {
 public:
  // Opens the volume whose target 0 is `path`, read-only, and every other
  // target it names (relative paths in the table are resolved against the
  // directory of `path`; options.target_map overrides them). Any of them
  // may be an NBD URI (dlfs/nbd.h): an export is checked like a file, and
  // a relative path stored for a volume opened through a URI must be given
  // with target_map. Errors:
  // NotFound / IOError (with errno) when a file cannot be read; Corruption
  // for a bad magic, a checksum mismatch, a truncated file, a target that
  // does not belong to the volume (other uuid, index or size) or any
  // structural inconsistency; NotSupported for a newer format version or
  // unknown feature flags; InvalidArgument when `path` is a target other
  // than 0 or the target map names a target the volume does not have.
  // Messages about target t > 0 start with "target t (its path)".
  static Result<std::shared_ptr<Volume>> Open(const std::string& path,
                                              const VolumeOpenOptions& options);
  static Result<std::shared_ptr<Volume>> Open(const std::string& path) {
    return Open(path, VolumeOpenOptions{});
  }

  ~Volume();
  Volume(const Volume&) = delete;
  Volume& operator=(const Volume&) = delete;

  const std::string& path() const { return path_; }
  const VolumeInfo& info() const { return info_; }
  const SampleDirectory& directory() const { return directory_; }
  uint64_t size() const { return directory_.size(); }

  // ---- Samples. A sample is the bytes that were packed, checked against
  // their checksum: for a volume whose samples are stored whole (no field
  // records, docs/format.md §4.8.3) its stored extent, and for a volume of
  // one field (a compressed pack of an ImageFolder, IDX or LMDB source:
  // one unnamed field "") that field decoded. A volume whose samples have
  // several fields has no single sample bytes: these calls refuse it
  // (PlainSamples) and its fields are read by name below.

  // OK when samples of this volume read without naming a field; otherwise
  // NotSupported naming the volume, listing its fields and saying how to
  // name them.
  Status PlainSamples() const;
  // The length of sample `index` as Read returns it (decoded). Errors: an
  // index out of range (InvalidArgument), PlainSamples' refusal, a sample
  // lacking the volume's one field (NotFound naming it).
  Result<uint64_t> SampleSize(uint64_t index) const;
  // Reads sample `index` into `dst`, which must be exactly SampleSize(index)
  // bytes. With `verify`, the stored bytes are checked against their CRC32C
  // first and a mismatch is a Corruption status naming the sample; `dst`
  // must then not be used. A compressed sample is decoded after its checks
  // (docs/format.md §4.8.4). InvalidArgument for an index out of range.
  Status ReadInto(uint64_t index, std::span<std::byte> dst, bool verify = true) const;
  // Same, into a new buffer.
  Result<std::vector<std::byte>> Read(uint64_t index, bool verify = true) const;

  // The stored extent of sample `index` (all its fields' stored bytes,
  // compressed ones as stored), checked against the sample's CRC32C with
  // `verify`: for tools that copy or inspect volumes, not for training.
  // `dst` must be exactly directory().sample(index).length bytes.
  Status ReadStoredInto(uint64_t index, std::span<std::byte> dst, bool verify = true) const;
  Result<std::vector<std::byte>> ReadStored(uint64_t index, bool verify = true) const;
  // Checks `bytes` (a stored extent) against sample `index`'s stored
  // CRC32C: OK, or a Corruption status naming the volume, the sample and
  // both checksums. REQUIRES: index < size().
  Status CheckSample(uint64_t index, std::span<const std::byte> bytes) const;

  // ---- Tokens (a token volume, docs/format.md §10.11; the directory's
  // token_width(), DocumentStart, DocumentAt say where documents lie).

  // Tokens [first, first + count) of the corpus (across documents) into
  // `dst`, exactly count * token_width bytes of little-endian token ids.
  // Reads the chunk-aligned range of the token stream covering them and,
  // with `verify`, checks those chunks against the token checks first:
  // Corruption naming the volume, the chunk and its tokens. InvalidArgument
  // for tokens past the corpus's end or a `dst` of another size;
  // NotSupported for a volume that is not a token volume.
  Status ReadTokens(uint64_t first, uint64_t count, std::span<std::byte> dst,
                    bool verify = true) const;

  // ---- Fields (format v2, docs/format.md §4.8). A volume without the
  // fields feature has one unnamed field "" per sample: the whole sample.
  // These return decoded fields by name.

  // Field `field` of sample `index`, decoded. NotFound naming the sample when
  // it has no such field (or the volume has no field of that name); with
  // `verify`, the stored bytes are checked against the field's CRC32C.
  // Corrupt stored bytes, a zstd frame whose declared size differs from the
  // directory's (refused before anything is allocated for it), or a decoded
  // length that differs: Corruption naming the volume, the sample and the
  // field.
  Result<std::vector<std::byte>> Read(uint64_t index, std::string_view field,
                                      bool verify = true) const;
  Result<std::vector<std::byte>> Read(uint64_t index, const char* field, bool verify = true) const {
    return Read(index, std::string_view(field), verify);
  }
  // Every field of sample `index` as (name, decoded bytes), in storage
  // order: one read of the sample's extent.
  Result<std::vector<std::pair<std::string, std::vector<std::byte>>>> ReadFields(
      uint64_t index, bool verify = true) const;
  // Decodes field `f` of sample `index` from its stored bytes `stored`
  // (f.stored_length of them) into `out` (f.decoded_length bytes; the same
  // memory as `stored` is fine only for raw fields; for a raw field an empty
  // `out` checks without copying). With `verify`, checks the field's CRC32C
  // first. Errors as Read(index, field).
  Status DecodeField(uint64_t index, const FieldInfo& f, std::span<const std::byte> stored,
                     std::span<std::byte> out, bool verify = true) const;
  // "v.dlfs: sample 3 'train/003' field 'json'": how errors name a field.
  std::string FieldContext(uint64_t index, uint32_t field) const;

  // The metadata this volume was opened from: a copy of each target's
  // superblock and a reference to the directory region in use.
  VolumeMetadata metadata() const;

  // Checks the copy of the superblock at the end of every target: OK when
  // each is identical to that target's primary; otherwise Corruption naming
  // the first target whose copy differs.
  Status CheckBackupSuperblock() const;

  // Releases the target files before the Volume is destroyed (Python's
  // `with dlfs.Volume(...)`). Afterwards reading samples (ReadInto, Read,
  // CheckBackupSuperblock, VerifyVolume) fails with InvalidArgument "...
  // is closed"; info(), directory() and metadata() stay usable, and loaders
  // made from this volume are unaffected (they open the targets
  // themselves). Safe while other threads read: each descriptor is
  // atomically pointed at /dev/null (dup3) rather than closed, so its number
  // stays reserved until destruction and a read in flight completes or
  // fails but never reads another file. Calling it again does nothing.
  void Close();
  bool closed() const { return closed_.load(std::memory_order_acquire); }

  uint32_t target_count() const { return static_cast<uint32_t>(targets_.size()); }

  // The node region holding this volume's directory (DirectorySharing::kNode
  // or a collective open), or "" for a private copy.
  const std::string& directory_region() const { return directory_region_; }
  // Why a node copy was asked for but the directory is private, or "".
  const std::string& directory_note() const { return directory_note_; }

  // The file descriptor of target `t` (read-only, close-on-exec), for I/O
  // engines that read the data region themselves; -1 if not opened here
  // (open_only) or not a file (an NBD export). REQUIRES: t < target count.
  int target_fd(uint32_t t) const;
  bool target_open(uint32_t t) const;
  // Reads exactly n bytes at `offset` of target t, file or NBD export;
  // errors name `what`. Unavailable for a target not opened here. Any
  // thread. REQUIRES: t < target count.
  Status ReadTarget(uint32_t t, void* buf, size_t n, uint64_t offset,
                    const std::string& what) const;
  // info().targets with "" for targets not opened here: what an IoEngine
  // for this volume is created with.
  std::vector<std::string> OpenTargetPaths() const;

 private:
  Volume() = default;

  std::string path_;
  VolumeInfo info_;
  // By target (file, device or NBD export); null when not opened here.
  std::vector<std::unique_ptr<io_internal::Target>> targets_;
  std::atomic<bool> closed_{false};
  SampleDirectory directory_;
  VolumeMetadata metadata_;
  std::string directory_region_;
  std::string directory_note_;
  // The zstd dictionary prepared for decoding (format::ZstdDictionary), or
  // null when the volume has none.
  std::shared_ptr<const void> dictionary_;
};

}  // namespace dlfs
