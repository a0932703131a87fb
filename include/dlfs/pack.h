// Pack: turn an existing data set into a dlfs volume (`dlfs pack`).
//
// Importers (the `from` option):
//   imagefolder  a class-per-directory tree, as torchvision's ImageFolder
//                (0.14, Debian 12's) reads it: the classes are the top-level
//                directories, hidden ones included (Jupyter's
//                ".ipynb_checkpoints"), label = index in sorted (byte-wise)
//                order; every file below one with one of torchvision's
//                image extensions (IMG_EXTENSIONS: .jpg .jpeg .png .ppm .bmp
//                .pgm .tif .tiff .webp, any case; hidden ones such as macOS
//                "._x.jpg" included) is a sample stored under its relative
//                path. Left out (and counted in PackStats): other files and
//                files directly at the root. A tree without a class
//                directory is an error; classes without a sample, which
//                torchvision refuses, are listed in PackStats. With
//                skip_hidden, hidden files and directories (a name starting
//                with '.') are left out too, as dlfs did before: labels then
//                differ from torchvision's where a hidden directory is at
//                the top. With all_files, every regular file is a sample,
//                and files at the root get no label.
//   idx          MNIST / Fashion-MNIST IDX files (optionally .gz) in a
//                directory: each "<split>-images-idx3-ubyte" with its
//                "<split>-labels-idx1-ubyte"; each image's raw bytes become
//                sample "<split>/<index>" (zero-padded, "t10k" named "test").
//   tar          WebDataset-style tar shards (a .tar file, or a directory of
//                them, optionally compressed): one sample per key (path up
//                to the first '.' of the file name), named by the key, whose
//                fields are its members (field = the rest of the name:
//                "jpg", "seg.png", "cls"; format v2, docs/format.md §4.8),
//                wherever they sit, in any shard; a key with one field twice
//                is an error naming both shards. The sample is labelled with
//                the integer in its key's ".cls" member, if any. A key whose
//                members are adjacent streams; other keys are held in memory
//                until their last member is read. A hard link gets its
//                target's bytes; symbolic links, FIFOs and devices are an
//                error (skipped and counted with skip_unreadable); absolute
//                member paths and ".." components are refused.
//   lmdb         an LMDB database (a directory with data.mdb, or the file),
//                e.g. Caffe's: one sample per record in key order, named by
//                its key (or its zero-padded record index when some key is
//                not a valid file name), labelled from the record's Caffe
//                Datum when it parses as one. The stored bytes are the
//                record's value, or only the Datum's data with
//                lmdb_payload_only.
//   megatron     a Megatron-LM indexed dataset (megatron/core/datasets/
//                indexed_dataset.py): the prefix "dir/name" of name.bin and
//                name.idx, or either file. Makes a token volume (docs/
//                format.md §10.11): each sequence (what Megatron's
//                GPTDataset samples) becomes one document, in order; the
//                .idx's document_indices are not used (their size is
//                checked). Integer token dtypes are stored as uint16 when
//                every id fits (known from the dtype for uint8, int8, int16
//                and uint16; found by a scan of the .bin for int32 and int64,
//                unless token_dtype says) else uint32; negative ids or ids of
//                2^32 or more are an error naming the file and the token,
//                float dtypes are refused. A multimodal .idx's sequence
//                modes become the documents' labels (the mode numbers:
//                Megatron's preprocess_mmdata writes 0 for text, 1 for an
//                image). The .bin is copied in large pieces.
//   tokens       raw token ids: a .npy file (1-D, any integer dtype; the
//                width chosen as for megatron) or a flat binary file
//                (token_dtype says uint16 or uint32), cut into documents by
//                `lengths` (a .npy or text file of token counts, one per
//                line, summing to the token count) or by `eod` (each
//                document ends after its end-of-document token, which it
//                keeps; tokens after the last one are the last document).
//
// Image preparation (options.volume.images, dlfs/image_prep.h: `dlfs pack
// --max-side/--jpeg-quality/--image-format`): imagefolder, tar and lmdb
// (with lmdb_payload_only: the records' encoded images) sources; each image
// is held whole in memory while threads prepare it. skip_unreadable also
// leaves out images that cannot be prepared (counted in PackStats::skipped
// and ::images).
//
// Packing streams: sample bytes pass through buffers of at most a few MiB,
// whatever a sample's size or what a header claims; memory grows only with
// the directory entries (and, for tar, one entry per labelled key). Counts
// and sizes read from a source are checked against the source before they
// size anything. The volume is written atomically by VolumeBuilder.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/enum_names.h"
#include "dlfs/status.h"

namespace dlfs {

enum class SourceKind { kAuto, kImageFolder, kIdx, kTar, kLmdb, kMegatron, kTokens };

inline constexpr EnumName<SourceKind> kSourceKindNames[] = {
    {SourceKind::kAuto, "auto"},    {SourceKind::kImageFolder, "imagefolder"},
    {SourceKind::kIdx, "idx"},      {SourceKind::kTar, "tar"},
    {SourceKind::kLmdb, "lmdb"},    {SourceKind::kMegatron, "megatron"},
    {SourceKind::kTokens, "tokens"}};

// "auto", "imagefolder", "idx", "tar", "lmdb", "megatron", "tokens".
std::string_view SourceKindName(SourceKind kind);
Result<SourceKind> ParseSourceKind(std::string_view name);

// Picks the importer for `source`: a data.mdb file or a directory holding
// one is lmdb; a directory holding *-idx?-ubyte[.gz] files is idx; a .tar*
// file or a directory holding only tar files is tar; a .bin or .idx file
// with its sibling, or a prefix naming both, is megatron; a .npy file is
// tokens; any other directory is imagefolder.
Result<SourceKind> DetectSourceKind(const std::string& source);

// How far packing got. When progress is asked for (on_progress), the
// importers count first: imagefolder walks the tree, idx reads the headers,
// lmdb the record count (total_samples); tar shards would have to be read
// twice, so tar reports the bytes of the shards done so far instead
// (source_bytes of total_source_bytes, moving shard by shard).
struct PackProgress {
  uint64_t samples = 0;
  uint64_t bytes = 0;
  uint64_t skipped = 0;
  uint64_t total_samples = 0;       // 0 when unknown in advance
  uint64_t source_bytes = 0;        // tar: bytes of the shards finished
  uint64_t total_source_bytes = 0;  // tar: bytes of all shards; else 0
  double seconds = 0;
};

struct PackOptions {
  SourceKind from = SourceKind::kAuto;
  // The volume to write: alignment, overwriting, targets (dlfs/builder.h).
  VolumeBuilder::Options volume;
  bool skip_unreadable = false;  // count and skip sources that fail to read
  // Class names for label ids 0..n-1, overriding what the importer knows
  // (idx, tar and lmdb sources carry only numbers). For an imagefolder
  // tree, whose directories name its classes, one name per directory (in
  // sorted order) renames them; another count is InvalidArgument.
  std::vector<std::string> class_names;
  // tar: keep only these fields (WebDataset extensions without the dot,
  // e.g. {"jpg", "cls"}); empty keeps all. Labels still come from ".cls".
  std::vector<std::string> fields;
  // lmdb: store only a Caffe Datum's data field (e.g. the JPEG), not the
  // whole serialized Datum.
  bool lmdb_payload_only = false;
  // imagefolder: every regular file is a sample, not only what
  // torchvision's ImageFolder would load (see above).
  bool all_files = false;
  // imagefolder: leave out hidden files and directories, which
  // torchvision's ImageFolder reads (see above): the labels then differ
  // from torchvision's where a hidden directory is at the top.
  bool skip_hidden = false;
  // megatron and tokens: "uint16" or "uint32", the volume's token ids
  // ("" chooses, see above); for a flat binary tokens file (required) also
  // the file's.
  std::string token_dtype;
  // tokens: the file of document lengths in tokens (.npy, or text with one
  // per line), or "" to cut at `eod`.
  std::string lengths;
  // tokens: the end-of-document token id, or nullopt to cut by `lengths`.
  std::optional<uint64_t> eod;
  // Called about every 100 ms from the packing thread.
  std::function<void(const PackProgress&)> on_progress;
  // When set to true from another thread or a signal handler, packing stops
  // with Cancelled and leaves nothing behind.
  const std::atomic<bool>* cancel = nullptr;
};

struct PackStats {
  SourceKind from = SourceKind::kAuto;  // the importer used
  uint64_t samples = 0;
  uint64_t bytes = 0;
  uint64_t classes = 0;
  // Bytes of the zstd dictionary trained or given (options.volume.compress);
  // 0 for none.
  uint64_t dictionary_bytes = 0;
  // What image preparation did (options.volume.images; zero without it).
  ImagePrepStats images;
  uint64_t skipped = 0;
  std::vector<std::string> skipped_examples;  // "path: reason", the first few
  // Temporary files of killed earlier packs to the same destination, removed
  // before this one started (VolumeBuilder::removed_temporaries).
  std::vector<std::string> removed_temporaries;
  // imagefolder: entries left out because ImageFolder would not load them
  // (not with all_files): files without an image extension, files at the
  // root.
  uint64_t ignored_not_image = 0;
  uint64_t ignored_at_root = 0;
  std::vector<std::string> ignored_examples;  // relative paths, the first few
  uint64_t ignored() const { return ignored_not_image + ignored_at_root; }
  // imagefolder with skip_hidden: hidden files and directories left out
  // (each counted once), of which top-level directories (classes
  // torchvision has), with the first few paths.
  uint64_t skipped_hidden = 0;
  uint64_t skipped_hidden_classes = 0;
  std::vector<std::string> skipped_hidden_examples;
  // imagefolder: classes without a sample (torchvision's ImageFolder
  // refuses such a tree: "Found no valid file for the classes ...").
  std::vector<std::string> empty_classes;
  // imagefolder with class_names: "DIRECTORY -> NAME" for each class
  // directory given another name.
  std::vector<std::string> renamed_classes;
  // megatron and tokens: bytes per token id (2 or 4) and the tokens packed
  // (the samples are the documents); 0 for other sources.
  uint32_t token_width = 0;
  uint64_t tokens = 0;
  double seconds = 0;
};

// Class names as `dlfs pack --class-names` and dlfs.pack take them: "a,b,c"
// (empty names allowed), or "@FILE" with one name per line (a trailing '\r'
// dropped); "" is none. NotFound or IOError naming FILE.
Result<std::vector<std::string>> ParseClassNames(const std::string& spec);

// Field names as `dlfs pack --fields` and dlfs.pack(fields=) take them:
// "jpg,cls" (empty items are skipped; "" is none) for PackOptions::fields.
std::vector<std::string> ParseFieldNames(std::string_view spec);

// Packs `source` into a new volume at `volume_path` (its target 0). Errors
// name the source file at fault; on any error no volume is left at
// `volume_path` nor at any other target path. InvalidArgument when a target
// lies inside a directory `source` (packing would read its own output) or
// is the source file itself, and when an option of another importer is set
// (fields, all_files, lmdb_payload_only), naming the option, and for image
// preparation of an idx source or of an lmdb one without
// lmdb_payload_only (Caffe Datums are not images).
Result<PackStats> Pack(const std::string& source, const std::string& volume_path,
                       const PackOptions& options);

}  // namespace dlfs
