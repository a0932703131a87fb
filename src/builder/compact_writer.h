// Internal to src/builder: writes a compact (format v3) directory region
// (docs/format.md §10) while samples stream, in memory independent of the
// number of samples: each block's records are built in memory and spilled
// to an unnamed temporary file when the block closes; names go to two more.
// Finish lays the sections out and hands the region's bytes to a sink (the
// volume's target 0, after its data).
//
// The caller places the samples: all samples of a block on one target, back
// to back, each starting at a multiple of the alignment (AtBlockStart says
// when the next sample opens a block and may go to another target).
//
// Memory: one block of records and names; at Finish, when names were not
// added in sorted order, 8 bytes per sample to sort them.
//
// Token volumes (SetTokens; docs/format.md §10.11): the samples are
// unnamed documents on target 0, back to back across blocks, and the writer
// sums the CRC32C of every 2^check_shift bytes of their stream as the bytes
// go by (FeedTokens), spilling one u32 per chunk: no second pass over the
// data, nothing per document.
//
// Thread safety: none; one writer.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "builder/spill_file.h"
#include "dlfs/status.h"
#include "format/format.h"

namespace dlfs::builder_internal {

class CompactWriter {
 public:
  // Spill files go beside `volume_path`. REQUIRES: alignment a power of two;
  // block_shift within format::kMinBlockShift..kMaxBlockShift.
  static Result<std::unique_ptr<CompactWriter>> Create(const std::string& volume_path,
                                                       uint32_t alignment, uint32_t block_shift);

  uint64_t count() const { return count_; }
  // Whether the next sample opens a new block.
  bool AtBlockStart() const { return (count_ & (block_samples_ - 1)) == 0; }
  // Where the next sample of the open block must start (AtBlockStart false).
  uint64_t NextOffset() const;
  uint16_t block_target() const { return block_target_; }
  // Whether the samples have names: decided by the first sample.
  bool has_names() const { return names_ == 1; }
  bool names_sorted() const { return sorted_; }

  // Makes this a token volume's directory: documents of tokens of `width`
  // bytes (2 or 4), checked in chunks of 2^check_shift bytes. REQUIRES: no
  // sample added yet.
  Status SetTokens(uint32_t width, uint32_t check_shift);
  uint32_t token_width() const { return token_width_; }
  // The bytes of the document being added, as they are written; Add (or
  // AddDocuments) takes them into the stream, DropTokenBytes forgets them
  // (the document was abandoned and its bytes rewound).
  void FeedTokens(std::span<const std::byte> bytes);
  void DropTokenBytes();
  // Token volumes' fast path: documents of lengths[k] bytes with CRC
  // crcs[k] and label labels[k] (labels empty: none), the first at
  // `offset` of target 0, right after the document before, their bytes fed
  // already. REQUIRES: every length a multiple of the width, the spans of
  // one size (labels: or empty).
  Status AddDocuments(uint64_t offset, std::span<const uint64_t> lengths,
                      std::span<const uint32_t> crcs, std::span<const uint32_t> labels);

  // Adds the next sample: its target, offset in it, length, CRC32C, label
  // (class id or format::kNone) and path ("" for an unnamed sample; every
  // sample is named or none is). InvalidArgument for a path that is not
  // valid (docs/format.md §10.4), a duplicate of the sample added just
  // before, or a name where the others have none (and the reverse).
  // Duplicates among unsorted names are found by Finish.
  Status Add(uint16_t target, uint64_t offset, uint64_t length, uint32_t crc32c, uint32_t label,
             std::string_view path);
  // Changes the label of sample n, which must be in the open block.
  Status SetLabel(uint64_t n, uint32_t label);

  struct Region {
    uint64_t length = 0;
    uint32_t header_crc32c = 0;  // what the superblock's region entry records
    uint64_t dir_count = 0;
  };
  // Writes the region through `sink` (in order, in pieces). class_names:
  // names of labels 0 .. class_names.size() - 1; labels up to class_count - 1
  // beyond them are named by their number. InvalidArgument naming the paths
  // when two samples share a path or a sample's path is also a directory.
  Result<Region> Finish(std::span<const std::string> class_names, uint64_t class_count,
                        const std::function<Status(std::span<const std::byte>)>& sink);

 private:
  CompactWriter() = default;
  Status CloseBlock();
  // Name of sample i from the spills (after Map).
  std::string_view SpilledName(uint64_t i) const;
  // Finish's parts.
  Status SortNames(std::vector<uint64_t>* order);
  Status BuildTree(const std::vector<uint64_t>& order, uint64_t* dir_count);
  // Token volumes: takes the bytes fed since the last commit (`length` of
  // them, the document just added) into the stream's chunk sums.
  Status CommitTokens(uint64_t length);

  uint32_t alignment_ = 1;
  uint32_t block_shift_ = format::kDefaultBlockShift;
  uint64_t block_samples_ = 0;
  uint64_t count_ = 0;
  uint64_t max_length_ = 0;
  int names_ = -1;  // -1 undecided, 0 none, 1 named
  bool sorted_ = true;
  std::string previous_name_;

  // The open block.
  uint16_t block_target_ = 0;
  uint64_t block_offset_ = 0;
  std::vector<uint64_t> ends_;
  std::vector<uint32_t> crcs_;
  std::vector<uint32_t> labels_;

  std::vector<std::byte> block_records_;    // CloseBlock's, reused
  std::vector<format::BlockEntry> blocks_;  // 32 bytes per block of samples
  uint64_t records_bytes_ = 0;
  std::unique_ptr<SpillFile> records_;     // the records section, as it will be
  std::unique_ptr<SpillFile> name_bytes_;  // every name, back to back
  std::unique_ptr<SpillFile> name_ends_;   // u64 end of each name in name_bytes_
  std::unique_ptr<SpillFile> tree_;        // TreeEntry[dir_count] (Finish)
  std::unique_ptr<SpillFile> tree_paths_;  // directory paths (Finish)
  uint64_t names_total_ = 0;
  const std::byte* name_bytes_map_ = nullptr;
  const uint64_t* name_ends_map_ = nullptr;
  std::string volume_path_;

  // Token volumes. The stream's chunk sums: chunks_ complete ones spilled
  // to token_checks_; the open chunk's CRC and bytes as committed (crc_,
  // filled_) and with the bytes fed since (fed_*), whose completed chunks
  // wait in fed_done_ until the commit.
  uint32_t token_width_ = 0;
  uint32_t check_shift_ = 0;
  uint64_t chunk_bytes_ = 0;
  uint64_t stream_end_ = 0;  // target 0's offset where the next document starts
  std::unique_ptr<SpillFile> token_checks_;
  uint64_t chunks_ = 0;
  uint32_t crc_ = 0;
  uint64_t filled_ = 0;
  uint32_t fed_crc_ = 0;
  uint64_t fed_filled_ = 0;
  uint64_t fed_bytes_ = 0;
  std::vector<uint32_t> fed_done_;
};

}  // namespace dlfs::builder_internal
