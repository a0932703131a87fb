// Internal to src/builder: VolumeBuilder's state, shared by its files —
// volume_builder.cc (the public calls: samples, fields, labels),
// builder_targets.cc (naming, creating and writing the targets) and
// finish.cc (Finish, step by step, down to sealing and publishing).
#pragma once

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "builder/compact_writer.h"
#include "builder/image_stage.h"
#include "dlfs/builder.h"
#include "format/directory_codec.h"
#include "format/format.h"
#include "format/zstd_field.h"
#include "io/target.h"

namespace dlfs {

namespace builder_internal {

// Writes a target's full buffers on a thread of its own while the next one
// fills (token volumes: large sequential writes, whose copies into the page
// cache took as long as everything else an import does). One buffer is in
// flight at a time, written in the order handed over.
class WriteBehind {
 public:
  using WriteFn = std::function<Status(std::span<const std::byte> data, uint64_t offset)>;
  explicit WriteBehind(WriteFn write);
  ~WriteBehind();  // waits for the buffer in flight
  WriteBehind(const WriteBehind&) = delete;
  WriteBehind& operator=(const WriteBehind&) = delete;

  // Hands *data (to go at `offset`) to the thread once the buffer before it
  // is written, and leaves in *data an empty buffer to fill next. The first
  // error of an earlier write, if any, instead (and every time after).
  Status Submit(std::vector<std::byte>* data, uint64_t offset);
  // Waits until every buffer handed over is written: the first error.
  Status Wait();

 private:
  void Run();

  WriteFn write_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::byte> job_;    // in flight while pending_
  std::vector<std::byte> spare_;  // the last one written, to be refilled
  uint64_t offset_ = 0;
  bool pending_ = false;
  bool stop_ = false;
  Status error_;
  std::thread thread_;
};

}  // namespace builder_internal

// Entries kept per added sample and directory until Finish() orders them:
// the codec's tree types, so Finish hands them over without a copy.
using PendingSample = format::TreeSample;
using PendingDir = format::TreeDir;

class VolumeBuilder::Impl {
 public:
  // One output target: a buffered append-only writer over it (a file's
  // temporary file, or an export written in place).
  // Bytes [buf_start, buf_start + buf.size()) are not yet in the target.
  struct TargetFile {
    std::string path;         // final name
    std::string stored_path;  // as recorded in target 0's table ("" for target 0)
    std::string temp_path;    // where it is written until published; "" for an export
    std::unique_ptr<io_internal::Target> target;  // closed (null) once Finish ran
    std::vector<std::byte> buf;
    uint64_t buf_start = format::kSuperblockSize;
    bool published = false;  // made visible at `path` by this Finish
    // A new file: what lies past every byte written to it reads as zeros,
    // so Flush leaves pages of zeros there as holes (a sparse source, e.g.
    // token ids of 0, makes a sparse volume). Not for an export, written
    // over its old contents.
    bool sparse = false;
    uint64_t written_end = 0;  // the end of the furthest write made
    // Token volumes: full buffers are written by this thread (the target,
    // written_end and the bytes of a buffer in flight are its until Wait).
    // Declared after `target`, so destroyed (waiting) before it.
    std::unique_ptr<builder_internal::WriteBehind> behind;

    uint64_t Tell() const { return buf_start + buf.size(); }
  };

  std::string path_;
  Options options_;
  // The compact layout's directory writer (docs/format.md §10), or null for
  // the tree layout. With kAuto it exists until the first sample decides.
  std::unique_ptr<builder_internal::CompactWriter> compact_;
  bool layout_decided_ = false;
  std::string cur_compact_path_;  // the open sample's path (compact layout)
  // Compact layout: starts sample `cur_` with `path`: picks its target (a
  // new block's is the emptiest target), pads, records where it starts.
  Status BeginCompactSample(std::string_view path, uint32_t label);
  Status EndCompactSample();
  // One whole sample in the compact layout (AddBatch's fast path).
  Status AddCompact(std::string_view path, std::span<const std::byte> bytes, uint32_t label);
  // A token volume's AddBatch (Options::token_width): all checked, then
  // written a slice of documents at a time.
  Status AddDocuments(std::span<const std::byte> data, std::span<const uint64_t> lengths,
                      std::span<const uint32_t> labels, std::span<const std::string_view> paths);
  std::vector<uint32_t> crcs_;  // AddDocuments' per-batch CRCs
  // kAuto: the first sample wants fields; continue in the tree layout (the
  // caller begins the sample again).
  void SwitchToTree();
  std::vector<TargetFile> targets_;  // target 0 is path_
  std::vector<std::string> removed_temporaries_;
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

  // Image preparation (Options::images; image_stage.*). With a stage,
  // samples are not placed when begun: their fields are held raw
  // (cur_fields_) and the finished sample goes to the stage; Commit writes
  // (or holds, while training) what comes back, in the order added.
  std::unique_ptr<builder_internal::ImageStage> stage_;
  std::string cur_path_;  // the open sample's path
  std::vector<builder_internal::PrepSample::Field> cur_fields_;
  uint64_t committed_ = 0;     // samples_[0, committed_) came back from the stage
  std::vector<bool> dropped_;  // by sample number: left out (its image failed)
  // Images that failed without skip_unreadable, not yet returned: each Add
  // returns the oldest, Finish all that remain, so every sample left out is
  // named by some call (several can come back from the stage at once).
  std::deque<Status> unreported_;
  std::vector<format::TreeImage> image_records_;  // sample number, provisional field id
  ImagePrepStats image_stats_;
  // Hands the finished sample to the stage, then takes back what is done
  // (waiting while the stage holds its window's worth).
  Status SubmitPrepared(builder_internal::PrepSample sample);
  // Takes back every sample done (all in flight when `all`, waiting); the
  // first error writing one is returned after the others were taken back
  // too (an image that failed goes to unreported_ instead).
  Status TakePrepared(bool all);
  // The oldest unreported image failure, or Ok.
  Status NextUnreported();
  // Writes (or holds for training) a sample that came back.
  Status Commit(builder_internal::PrepSample& s);
  // Places sample `s` on a target and stores its fields' raw bytes (the
  // write path of a sample whose bytes are all at hand).
  Status PlaceAndStore(PendingSample& s, std::span<std::vector<std::byte>> field_bytes);
  // Finish: removes the samples left out, renumbering the image records.
  void RemoveDropped();
  // The images section's header for the options.
  format::ImagesHeader MakeImagesHeader() const;
  format::ImagesHeader images_header_{};  // what Tree() points the encoder at

  // The paths added so far, so that a duplicate is refused when it is added
  // rather than at Finish: an open-addressed table of sample numbers keyed
  // by (directory, name), at most half full (4-byte slots: 8 to 16 bytes per
  // sample); the names are those in names_.
  std::vector<uint32_t> path_slots_;
  // Where samples came from, for messages: (first sample number, source).
  std::vector<std::pair<uint64_t, std::string>> sources_;

  // ---- Compression (volume_builder.cc)

  // Checks the compression options and prepares the dictionary given, or
  // training when one is to be trained.
  Status SetUpCompression(const Options::Compression& c);
  // Writes stored bytes of sample `s` (and of its field `f`, if any) to its
  // target.
  Status WriteBytes(PendingSample& s, format::TreeField* f, std::span<const std::byte> data);
  // Writes stored bytes of the open sample (and field).
  Status WriteSampleBytes(std::span<const std::byte> data) {
    return WriteBytes(cur_, in_field_ ? &cur_field_ : nullptr, data);
  }
  // Stores field `f` of sample `s` from its raw bytes: compressed (with the
  // dictionary, if any) when that saves at least min_saving, else raw.
  Status StoreField(PendingSample& s, format::TreeField& f, std::span<const std::byte> raw);
  // Ends training: trains the dictionary on the held fields, then places
  // and writes every held sample in the order added.
  Status TrainAndWrite();

  // ---- Paths (volume_builder.cc)

  std::string_view NameOf(const PendingSample& s) const {
    return std::string_view(names_).substr(s.name_offset, s.name_length);
  }
  static uint64_t PathHash(uint32_t dir, std::string_view name) {
    const uint64_t h = std::hash<std::string_view>{}(name);
    return h ^ ((uint64_t{dir} + 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull);
  }
  // The slot holding the sample at (dir, name), or the empty slot where it
  // would go. REQUIRES: path_slots_ is not empty.
  size_t Probe(uint32_t dir, std::string_view name) const;
  // The sample already added at (dir, name), if any.
  std::optional<uint32_t> FindSample(uint32_t dir, std::string_view name) const;
  // Enters the last added sample into the table, growing it first when it
  // would become more than half full.
  void IndexLastSample();
  // "sample #12" or "sample #12 from shard-000.tar".
  std::string DescribeSample(uint64_t n) const;
  // The id of directory `dir_path` (creating it and its parents); `full`
  // is the sample path that needs it, for messages.
  Result<uint32_t> DirId(std::string_view dir_path, std::string_view full);

  uint64_t class_count() const;

  // ---- Targets (builder_targets.cc)

  // Names every target: its path, what target 0's table records for it;
  // refuses a target 0 that cannot be published by rename and two names of
  // one target.
  Status NameTargets();
  // Creates every target (after the early check that none exists and the
  // removal of killed builders' leftovers), claiming an export's old
  // contents (docs/format.md §6 and §6.1, step 1).
  Status CreateTargets();
  // Writes the buffered bytes of `t` to it.
  Status Flush(TargetFile& t);
  // Appends `data` to `t` through its buffer (a large one straight).
  Status Write(TargetFile& t, std::span<const std::byte> data);
  // Writes `data` at `start` of t's target: whole, or with pages of zeros
  // past the furthest write so far left as holes (TargetFile::sparse).
  static Status WriteOut(TargetFile& t, std::span<const std::byte> data, uint64_t start);
  // Moves the logical end back to `pos` (dropping a half-written sample).
  static void Rewind(TargetFile& t, uint64_t pos);
  // Appends zeros up to the next multiple of `align`.
  Status Pad(TargetFile& t, uint64_t align);
  // The target the next sample goes to.
  uint32_t PickTarget() const;

  // ---- Finish, step by step (finish.cc)

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
  // The compact layout's Finish: the same steps with CompactWriter's region.
  Status FinishCompact();
  uint64_t compact_dir_count_ = 0;
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
  // Gives each target its own sealed copy of `sb` at both ends, sizes it
  // and makes it durable. Nothing is published yet.
  Status Seal(const format::Superblock& sb);
  // Publishes every sealed target (PublishAll) and makes that durable.
  Status Publish();
  // Publishes every target, target 0 last: target 0 is the only way into
  // the volume, so until it is published nothing that opens as a volume
  // exists (a lone target t > 0 is refused by readers). If one fails, the
  // targets already published are withdrawn again.
  Status PublishAll();
};

}  // namespace dlfs
