// VolumeBuilder: writes a new dlfs volume, sample by sample.
//
// Samples stream to a temporary file next to the destination
// ("<path>.tmp.<pid>.<n>") while only their directory entries (32 bytes plus
// the name) stay in memory. Finish() writes the directory region and both
// superblocks, fsyncs, then renames the temporary file into place, so a
// crash or an error at any point leaves no file that opens as a volume. The
// destination is never replaced unless Options::overwrite is set.
//
// With Options::targets = N > 1 the samples are spread over N files (e.g.
// on N devices): target 0 is `path` and holds the directory, targets 1..N-1
// are further files, each with its own temporary file. Each sample goes
// whole to the target holding the fewest bytes so far. All targets are
// written and fsynced before any is renamed into place, target 0 last, and
// a failed rename removes the targets already renamed; see docs/format.md §6
// for what a crash can leave. Each temporary file carries a write lock
// (F_OFD_SETLK) while its builder lives, so that the next builder for the
// same path can tell a killed builder's leftovers from a running one's and
// remove them.
//
// Paths are relative, '/'-separated ("cat/001.jpg"); intermediate directories
// are created implicitly. A path may hold one sample; a name cannot be both a
// sample and a directory. Both are refused when the offending sample is
// added (BeginSample / Add), before any of its bytes are written, naming the
// sample that came first (and its source, see SetSourceName). Sample order
// in the volume is canonical (see docs/format.md §4), not insertion order.
//
// Memory: per sample, its directory entry (32 bytes plus the name) and 8 to
// 16 bytes in the table of paths that finds duplicates; per directory, its
// entry and its path.
//
// Image preparation (Options::images, dlfs/image_prep.h; docs/format.md
// §4.9): each finished sample is held in memory and its image fields (the
// unnamed field, "jpg", "jpeg", "png") are prepared on Options::images.threads
// threads while the caller adds the next ones; samples are written in the
// order added, so the volume is the same whatever the number of threads. At
// most about 2 x threads + 2 samples are held. An image that cannot be
// prepared is left out of the volume: counted in image_stats() with
// images.skip_unreadable, else reported as an error naming the sample by
// the call that takes its result back — the EndSample (or Add) of that
// sample or of a later one, or Finish — after which the builder stays
// usable. The volume records the options and each changed image's original
// size (compat flag IMAGES).
//
// Thread safety: none; use one builder from one thread (it runs its own
// preparation threads inside).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/directory.h"
#include "dlfs/enum_names.h"
#include "dlfs/image_prep.h"  // Options::images, image_stats()
#include "dlfs/status.h"

namespace dlfs {

// How a volume's directory is laid out (docs/format.md).
enum class DirectoryLayout : uint8_t {
  // The compact directory of format v3 (§10), used in place through a
  // mapping and checked block by block: 6-10 bytes per sample, names and
  // the tree optional; written while the samples stream, in memory
  // independent of their number. A sample's index is the order it was
  // added in. Holds one unnamed raw field per sample: no fields,
  // compression or image preparation.
  kCompact,
  // The format v1/v2 directory (§4): 32 bytes per sample plus names, read
  // whole at open; samples ordered by path; fields, zstd, prepared images.
  // The whole directory is held in memory until Finish.
  kTree,
  // kCompact unless the options ask for compression or image preparation,
  // or the first sample is given a named field (then kTree).
  kAuto,
};
inline constexpr EnumName<DirectoryLayout> kDirectoryLayoutNames[] = {
    {DirectoryLayout::kAuto, "auto"},
    {DirectoryLayout::kCompact, "compact"},
    {DirectoryLayout::kTree, "tree"}};

class VolumeBuilder {
 public:
  struct Options {
    // The directory's layout: by default compact, unless what is written
    // needs the tree (kAuto).
    DirectoryLayout layout = DirectoryLayout::kAuto;
    // Compact layout: samples per block of the directory, 2^block_shift
    // (4..16); a block is the unit checked on first use, and its samples lie
    // on one target. 0: 10 (1,024 samples) for one target, 5 (32) for
    // several, so that small volumes still spread over their targets.
    uint32_t block_shift = 0;
    // Every sample starts at a multiple of this (a power of two, at most
    // 1 MiB). 1 packs samples back to back; 4096 lets O_DIRECT readers read
    // each sample without touching a neighbour, at the cost of padding.
    uint32_t align = 1;
    // Replace existing files at the destinations (each atomically, on
    // Finish; a multi-target volume as a whole is not replaced atomically).
    bool overwrite = false;
    // Number of target files, 1 to 8; 0: one more than target_paths names
    // (1 without them).
    uint32_t targets = 0;
    // Paths of targets 1, 2, ... (exactly targets - 1 of them), or empty for
    // DefaultTargetPath's names. Target 0's table records each relative to
    // the directory of `path` when it lies at or below it, else absolute;
    // such a recorded path must fit in 240 bytes. A path may be an NBD URI
    // (dlfs/nbd.h; recorded as given): the export, at least as large as the
    // target, is written in place — its old superblock is zeroed at
    // Create, and the new one written last, after the data and a flush
    // (docs/format.md §6.1). An export holding a dlfs target counts as
    // existing (overwrite replaces it). Target 0 must be a file.
    std::vector<std::string> target_paths;
    // How many targets these options make: `targets`, or for 0 its default.
    uint32_t TargetCount() const;
    // Where the targets of a volume at `path` go, target 0 (`path`) first:
    // target_paths, or DefaultTargetPath's names. Options Create refuses
    // (target_paths naming fewer than TargetCount() - 1, more than 8
    // targets) get only the paths they name, at most 8.
    std::vector<std::string> TargetPaths(const std::string& path) const;
    // Per-field compression (format v2, docs/format.md §4.8.4). Off: fields
    // are stored raw. On: each field is compressed with zstd at `level` and
    // kept raw when that saves less than `min_saving` of its bytes.
    struct Compression {
      bool zstd = false;
      int level = 3;
      double min_saving = 0.03;
      // A zstd dictionary to compress with (stored in the volume when a
      // field uses it), e.g. from TrainDictionary; empty for none.
      std::vector<std::byte> dictionary;
      // Train the dictionary on the first fields added instead of taking
      // one (`dlfs pack --dict`); needs zstd and no `dictionary`. Samples
      // stay in memory, their fields raw, and are not written until the
      // first `training_bytes` of fields (or `training_fields` fields)
      // have been added — or until Finish for a smaller volume. Then a
      // dictionary of up to `dictionary_max_bytes` is trained on them
      // (TrainDictionary) and every sample, those held included, is
      // compressed with it, in the order added; memory stays bounded by
      // the training set. Until then data_bytes() counts nothing of the
      // held samples. Training that fails (too little or too uniform data)
      // fails the Add that triggered it, or Finish: InvalidArgument.
      bool train_dictionary = false;
      size_t training_bytes = size_t{8} << 20;
      size_t training_fields = 10000;
      // zstd's default (110 KiB). The capacity given to the trainer is
      // min(this, training set / 10, at least 1 KiB): a dictionary much
      // larger than a tenth of what it learns from only overfits.
      size_t dictionary_max_bytes = 112640;
    } compress;
    // Image preparation (dlfs/image_prep.h): off unless images.enabled().
    ImagePrepOptions images;
    // A token volume (docs/format.md §10.11): 2 (uint16) or 4 (uint32)
    // bytes per token id; 0 for samples of any bytes. Each sample is then a
    // document, its bytes token ids (little-endian), a multiple of
    // token_width long (else InvalidArgument; empty documents are kept),
    // without a name (Add's path ""; AddBatch without paths) and with a
    // label only when given. Needs the compact layout (kAuto takes it) on
    // one target with align 1, without compression or image preparation
    // (InvalidArgument otherwise). The documents lie back to back; the
    // writer sums the CRC32C of every 4 KiB of them as they go by.
    uint32_t token_width = 0;
  };

  // Trains a zstd dictionary of at most `max_bytes` on `samples` (a few
  // hundred representative fields). InvalidArgument when zstd finds too
  // little to learn from.
  static Result<std::vector<std::byte>> TrainDictionary(
      const std::vector<std::vector<std::byte>>& samples, size_t max_bytes = 112640);

  // Creates the temporary files, first removing stale ones a builder killed
  // while writing the same destination left ("<path>.tmp.<pid>.<n>" of a
  // process no longer running here, whose file lock nobody holds; see
  // removed_temporaries()). AlreadyExists if a destination exists and
  // !options.overwrite; InvalidArgument for a bad alignment, target count or
  // target path (two targets naming one file, too long).
  static Result<std::unique_ptr<VolumeBuilder>> Create(const std::string& path, Options options);
  static Result<std::unique_ptr<VolumeBuilder>> Create(const std::string& path) {
    return Create(path, Options{});
  }

  // Removes the temporary file unless Finish() succeeded.
  ~VolumeBuilder();

  // Names of label ids 0..n-1. Labels at or beyond n get their decimal
  // number as name.
  void SetClassNames(std::vector<std::string> names);

  // Names the source of the samples added from now on (e.g. the tar shard
  // they come from), for the message that refuses a later duplicate path.
  void SetSourceName(std::string name);

  // Adds one sample with all its bytes. InvalidArgument for a bad path, a
  // path already added (naming the earlier sample and its source) or a path
  // that is also a directory. Compact layout: `path` may be "" for a volume
  // whose samples have no names (all or none are named); a duplicate path
  // or a path that is also a directory is found when added only among
  // paths added in sorted order, else by Finish.
  Status Add(std::string_view path, std::span<const std::byte> data, uint32_t label = kNoLabel);

  // Adds one sample in pieces: BeginSample, any number of Append, then
  // EndSample — or AbortSample to drop it (e.g. its source failed mid-read).
  Status BeginSample(std::string_view path, uint32_t label = kNoLabel);
  Status Append(std::span<const std::byte> data);
  Status EndSample();
  void AbortSample();

  // Multi-field samples (format v2, docs/format.md §4.8): between
  // BeginSample and EndSample, any number of BeginField(name), Append...,
  // EndField() — or AddField(name, bytes). Field names are at most 65535
  // bytes without '/' or NUL ("jpg", "seg.png"; "" is the unnamed field); a
  // sample holds each name at most once. Appending in a sample without
  // BeginField makes it one unnamed field. A volume whose samples are all a
  // single unnamed raw field is written as format v1, byte for byte.
  // With compression on, a field's bytes are held in memory until EndField.
  Status BeginField(std::string_view name);
  Status EndField();
  Status AddField(std::string_view name, std::span<const std::byte> data);

  // Sets the label of the n-th sample added (counting from 0, aborted
  // samples not counted), e.g. once a label that arrives after the sample's
  // bytes is known. InvalidArgument for n >= sample_count() or a label out
  // of range.
  Status SetLabel(uint64_t n, uint32_t label);

  // Adds samples in one call (the fast path of the compact layout): their
  // bytes back to back in `data`, lengths[k] bytes each, with labels[k]
  // (kNoLabel for none; `labels` may be empty for none at all) and paths[k]
  // (may be empty: no names). InvalidArgument when the lengths do not sum
  // to data's size or the arrays differ in length. A token volume's
  // documents (Options::token_width) are checked first, all of them (each a
  // multiple of the width, labels in range, no paths), then written: a
  // refused batch adds nothing.
  Status AddBatch(std::span<const std::byte> data, std::span<const uint64_t> lengths,
                  std::span<const uint32_t> labels, std::span<const std::string_view> paths = {});

  // The directory layout this builder writes (kAuto until decided).
  DirectoryLayout layout() const;

  // Writes the directory and superblocks, syncs and publishes the volume.
  // InvalidArgument if two samples share a path or a sample's path is also
  // a directory. The builder is unusable afterwards, whatever the result.
  Status Finish();

  // Samples added so far (SetLabel's numbering), those being prepared
  // included — and, until Finish, those an image preparation left out.
  // After a successful Finish: the samples in the volume.
  uint64_t sample_count() const;
  uint64_t data_bytes() const;  // sample bytes written (or held for a dictionary) so far
  // What image preparation did so far (all zero without it).
  const ImagePrepStats& image_stats() const;
  // Bytes of the zstd dictionary the volume will hold once a field uses
  // it: the given one, or the trained one once trained; 0 for none.
  uint64_t dictionary_bytes() const;
  // Classes the volume will have: max(class names set, largest label + 1).
  uint64_t class_count() const;
  const std::string& path() const;
  const std::string& temp_path() const;  // target 0's
  // The stale temporary files Create removed: "<file> (left by process
  // <pid>, <n> bytes)".
  const std::vector<std::string>& removed_temporaries() const;
  std::vector<std::string> target_paths() const;  // final names, target 0 first
  std::vector<std::string> temp_paths() const;    // same order

  // "<path>.t<target>": where target `target` > 0 goes without explicit
  // target paths (`path` itself for target 0).
  static std::string DefaultTargetPath(const std::string& path, uint32_t target);

 private:
  class Impl;
  explicit VolumeBuilder(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Parses a compression spec as `dlfs pack --compress`, dlfs.pack and
// dlfs.Writer take it: "zstd" or "zstd:LEVEL" (LEVEL 1..22), or "" / "none"
// for raw fields; `train_dictionary` (needs zstd) trains a dictionary on the
// first fields. The other members keep their defaults. InvalidArgument
// naming the spec and what is accepted. (Its sibling for reading,
// ParseTargetMap, is in dlfs/volume.h beside VolumeOpenOptions.)
Result<VolumeBuilder::Options::Compression> ParseCompression(std::string_view spec,
                                                             bool train_dictionary = false);

}  // namespace dlfs
