// Loader: shuffled, sharded batches of samples, read ahead through an
// IoEngine (io_uring by default) and handed out zero-copy.
//
//   auto vol = dlfs::Volume::Open("train.dlfs");
//   dlfs::LoaderOptions options;
//   options.sampler.batch_size = 256;
//   options.sampler.seed = 7;
//   auto loader = dlfs::Loader::Create(*vol, options);
//   for (uint64_t epoch = 0; epoch < 90; ++epoch) {
//     (*loader)->SetEpoch(epoch);
//     dlfs::Batch batch;
//     while (true) {
//       auto more = (*loader)->Next(&batch);      // error, or false at epoch end
//       if (!more.ok() || !*more) break;
//       for (size_t i = 0; i < batch.size(); ++i) Use(batch.sample(i), batch.label(i));
//     }
//   }
//
// A Loader is a BatchSource (dlfs/batch_source.h).
//
// Order: batch k of an epoch holds this rank's samples k*B .. k*B+B-1 of
// Sampler::RankIndices(epoch) (see dlfs/sampler.h), in that order, whatever
// order the reads completed in. They are computed when the batch is planned
// (Sampler::Ranked): nothing of the epoch's size is held, and the first
// batch of a billion-sample epoch is read as soon as that of a small one.
//
// Reading ahead: the order is known in advance, so each I/O thread streams
// the reads of the batches ahead of the caller through its engine, keeping
// queue_depth reads in flight across batch boundaries: up to
// prefetch_batches batches are being read or waiting while the caller works
// on one. At the end of an epoch the I/O threads go on with the first
// batches of the next epoch (epoch + 1, the usual next SetEpoch); they are
// handed out only after SetEpoch(epoch + 1), and dropped if another epoch
// is set. Nothing is read before the first SetEpoch() or Next().
//
// Memory: the batch buffers (a pool per I/O thread, sized from the volume's
// sample sizes, ~prefetch_batches + 3 batches in all) are allocated,
// touched and registered with the engines when the loader is created, so
// reads and checksums never pay page faults. They take at most an eighth of
// what the process may use (dlfs/memory.h): where that is short, fewer
// batches are read ahead, down to two buffers per I/O thread (one batch read
// while the caller uses the previous one), which may take up to three
// quarters of it; cache_note() says so, with the figure source_stats()
// reports. Where two do not fit, Create fails with InvalidArgument naming
// what a batch needs and batch_size. The pools never grow past that plan:
// an I/O thread waits for a buffer to come back instead, unless the caller
// holds every other one and waits for that batch. A sample is a span into its
// batch's buffer; the buffer returns to the pool when the last Batch copy
// referring to it is destroyed, so views stay valid for as long as the
// caller keeps the Batch — even after the Loader is gone. A caller holding
// many batches makes the pool grow. Decoded (zstd) fields live in one
// buffer per batch, recycled the same way.
//
// Node cache: samples the loader has read are kept in memory, once per
// node: every process reading the volume there (ranks, DataLoader workers,
// other jobs of the user) attaches to the same region in /dev/shm and reads
// a cached sample from it instead of the device — zero-copy, same order,
// same checks (see src/cache/node_cache.h). It is filled by large sequential
// reads of the volume on a thread of its own. With the default budget, a
// volume it holds whole is held from the first epoch when two or more
// epochs follow it (planned_epochs), and not filled otherwise; up to 2 GiB
// it is filled before the first read. A budget that holds part of the
// volume is filled where the costs measured say it pays. When the samples
// exceed cache_budget the first that fit stay cached (for epochs that each
// read every sample once that is as many hits as any eviction policy can
// get).
// The default budget is a quarter of what this job may use: MemAvailable
// and its memory cgroup's limit (dlfs/memory.h); 0 turns the cache off.
// Samples served from the cache are read-only (Batch::owns_bytes() false).
//
// Fields (format v2, docs/format.md §4.8): with `fields`, each batch holds,
// per sample, those fields in that order (Batch::field(i, f); sample(i) is
// field 0). The I/O threads read each sample's whole stored extent; in
// Next(), on the caller's thread, raw fields become spans into the read
// buffer (zero-copy) and zstd fields are decompressed into a buffer the
// batch owns (Volume::DecodeField). With verify_checksums each handed-out
// field's stored bytes are checked against its own CRC32C (the sample's
// CRC is then not checked: the fields not asked for are never looked at).
// A sample lacking a requested field, a field whose checksum fails or that
// does not decode: Next() returns an error naming the volume, the sample
// (index and path) and the field; the next call continues with the
// following batch. A volume without fields has one unnamed field "";
// without `fields`, a volume of one (compressed) field hands that field out
// as each sample, decoded as above.
//
// Resuming (see dlfs/batch_source.h): SaveState() is the epoch and the
// batches of it Next() has handed out, with the volume's uuid, the sample
// set and the sampler options; LoadState() on a loader created with the same
// volume and sampler options continues with the next batch, in the same
// order, without reading the batches before it. A loader of another world
// size or batch size (elastic resume) reads its share of the rest of the
// epoch: those batches are the epoch's last (Batch::sequence() goes on from
// batches_per_epoch() minus their count), and RankIndices() of that epoch
// returns its share of the rest.
//
// Errors: a failed read or a checksum mismatch (verify_checksums; checked in
// Next(), on the caller's thread, while the next batches are being read —
// as is field decoding, counted in verify_seconds) makes
// Next() return an error naming the volume file and every sample (index and
// path) whose bytes could not be read, or that failed its checksum; the next
// call continues with the following batch. A failed read that held several
// coalesced samples is re-read sample by sample first, so healthy
// neighbours are not named. Wrong bytes are never handed out as a sample.
//
// Quarantine: with skip_bad_samples, a sample whose read, checksum or
// field decoding fails is left out of its batch instead (the batch is one
// shorter; the other samples and every later batch are as without it; no
// sample is drawn to refill it, so the epoch's order never shifts), and
// recorded: quarantine() lists it, SaveState() carries it, and from then on
// — in later epochs and in a source resumed from that state — it is left
// out without being read as bad again. Once more than max_bad_samples are
// recorded, that Next() and every later one fail with an error naming them:
// a volume that bad wants fixing, not training on.
//
// Thread safety: one thread calls Next()/SetEpoch(); Batch objects may be
// read and destroyed from any thread; source_stats() may be called from any
// thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dlfs/batch.h"
#include "dlfs/batch_source.h"
#include "dlfs/io_engine.h"
#include "dlfs/memory.h"
#include "dlfs/sampler.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

// How a batch's samples become device reads (see docs/benchmarks.md).
struct ReadPlanOptions {
  // Merge the reads of samples whose extents touch or lie at most
  // coalesce_gap bytes apart. Gap 0 merges only extents sharing or touching
  // a block: in a shuffled batch samples lie far apart, and a larger gap
  // mostly reads bytes nobody asked for.
  bool coalesce = true;
  uint64_t coalesce_gap = 0;
  uint64_t max_read = 1 << 20;  // largest single read; bigger runs are split
};

// An explicit order for one epoch (LoaderOptions::order): this rank's
// sample indices, and where each batch starts in them (batch k is
// indices[batch_starts[k] .. batch_starts[k + 1]); batches may be empty).
struct LoaderOrder {
  std::vector<uint64_t> indices;
  std::vector<uint64_t> batch_starts;  // order_batches + 1 offsets, from 0 to indices.size()
};

struct LoaderOptions {
  SamplerOptions sampler;  // order, sharding, batch size (dlfs/sampler.h)
  EngineOptions engine;    // the I/O engine each I/O thread owns (dlfs/io_engine.h)
  ReadPlanOptions plan;
  uint32_t prefetch_batches = 4;  // batches read ahead of the caller (fewer if memory is short)
  // I/O threads, each owning one engine (one ring). 0: chosen — two where
  // io_uring reads local files through the page cache and this process has
  // two cores of its own (its CPU affinity over the launcher's processes
  // per node): the kernel copies a cached read on the submitting thread.
  // One otherwise (O_DIRECT, remote storage), where the device is the limit.
  uint32_t io_threads = 0;
  // CRC32C of every sample before hand-out; a sample the node cache serves
  // is checked the first time this process uses it (its bytes in the
  // region do not change once written), not again every epoch.
  bool verify_checksums = true;
  // Node cache budget in bytes (see above and dlfs/memory.h):
  // kAutoCacheBudget (a quarter of what the job may use, or
  // $DLFS_CACHE_BUDGET), or 0 for no cache.
  uint64_t cache_budget = kAutoCacheBudget;
  // Share the cache with the node's other processes reading the volume
  // (false: a cache of this loader's own).
  bool cache_shared = true;
  // Epochs the caller will read (0: not said; the loader then assumes
  // training's tens). With the default budget they decide whether the node
  // cache holds a volume it can hold whole (two or more after the first),
  // and, with the costs measured on this machine, whether filling part of
  // one pays (docs/architecture.md, "The node cache"). A budget given
  // explicitly (cache_budget, $DLFS_CACHE_BUDGET) is filled regardless, by
  // the end of the first epoch.
  uint32_t planned_epochs = 0;
  // With engine.direct_io: read through the page cache instead where
  // O_DIRECT would read kBufferedAbove times the samples' bytes or more
  // (samples much smaller than a block). False: engine.direct_io decides.
  bool auto_direct_io = true;
  // Read only these samples (e.g. a split: the samples under a directory,
  // a range when they are contiguous); the sampler orders positions in it
  // (dlfs/sampler.h). The default reads every sample; so does an empty
  // list, as when this was a vector.
  SampleSubset subset;
  // Fields to hand out per sample (format v2, see "Fields" above), in this
  // order, e.g. {"jpg", "cls"}. Empty: each sample (Volume::ReadInto's
  // bytes: a volume of one compressed field hands it out decoded), which
  // Create refuses for a volume with several fields.
  // Not part of the order: a saved state resumes with other fields.
  std::vector<std::string> fields;
  // Quarantine (see "Errors" above): leave bad samples out instead of
  // failing their batch, up to max_bad_samples of them; `quarantine` lists
  // samples to leave out from the start (e.g. `dlfs verify --json`'s).
  bool skip_bad_samples = false;
  uint32_t max_bad_samples = 16;
  std::vector<uint64_t> quarantine;
  // For sources built on loaders: when set, each epoch's order is
  // order(epoch), called once per epoch from any thread (again after
  // LoadState), with order_batches batches; the sampler's order, subset and
  // elastic resume then do not apply (the caller does that).
  std::function<std::shared_ptr<const LoaderOrder>(uint64_t epoch)> order;
  // The same batch by batch, holding nothing of the epoch's size (as
  // dlfs/mixture.h gives): batch k of an epoch is batch_order(epoch, k),
  // called when the loader plans that batch, from its I/O threads (several
  // at once, and again for the same batch after LoadState or SetEpoch); a
  // batch with an index out of the volume fails. Not with `order`.
  std::function<std::vector<uint64_t>(uint64_t epoch, uint64_t batch)> batch_order;
  uint64_t order_batches = 0;
};

class Loader final : public BatchSource {
 public:
  // Creates the engines (one per I/O thread) and the sampler. Errors:
  // InvalidArgument for bad options (a field the volume lacks: the message
  // lists its fields), NotSupported for a volume with several fields per
  // sample and no `fields`, Unavailable when a forced engine is
  // not supported here.
  static Result<std::unique_ptr<Loader>> Create(std::shared_ptr<Volume> volume,
                                                const LoaderOptions& options);
  ~Loader() override;

  // BatchSource. Before the first SetEpoch, Next() reads epoch 0.
  void SetEpoch(uint64_t epoch) override;
  Result<bool> Next(Batch* batch) override;
  uint64_t batches_per_epoch() const override;
  // What the engine is: "io_uring, O_DIRECT, ..., queue depth 64", and
  // and the node cache, if any.
  const std::string& description() const override;
  // Time, I/O and memory since the loader was created (any thread).
  SourceStats source_stats() const override;
  // Why the loader's memory is not as asked (a cache budget reduced to fit
  // the memory limit, a cache region refused or unavailable, the read-ahead
  // shortened so that its buffers fit), or empty: for the front end to show
  // as a warning.
  const std::string& cache_note() const;
  // Resuming (see above and dlfs/batch_source.h).
  Result<SourceState> SaveState() const override;
  Status LoadState(const SourceState& state) override;
  // Samples left out as bad (skip_bad_samples), in the order found; those
  // of LoaderOptions::quarantine or a loaded state first.
  std::vector<BadSample> quarantine() const;

  uint64_t epoch() const;
  const Sampler& sampler() const;
  // This rank's sample indices for `epoch`, in reading order (the sampler's
  // order mapped through `subset` when one is set).
  std::vector<uint64_t> RankIndices(uint64_t epoch) const;
  const Volume& volume() const;

 private:
  class Impl;
  explicit Loader(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace dlfs
