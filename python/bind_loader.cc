// Python binding of the loader: dlfs.Loader (dlfs/loader.h, or a
// MixtureSource of several volumes) and the Batch it hands out, whose
// samples are zero-copy numpy views (their base object keeps the C++ batch
// buffer alive).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "epoch_stats.h"
#include "loader_keywords.h"
#include "state_dict.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

constexpr const char* kBatchDoc = R"doc(
One batch from a Loader: len(batch) samples.

batch[i] / batch.samples are numpy uint8 views straight into the batch's
I/O buffer (no copy); the buffer stays alive as long as any view or the
Batch itself is referenced. They are writable when the buffer is this
batch's alone (a Loader's), so torch.from_numpy takes them without a warning;
read-only when the bytes are shared.

Fields (Loader(fields=[...])): batch.fields is a tuple with one list per
requested field, in the requested order, of uint8 views (batch.fields[f][i]
is field f of sample i; batch.field(i, f) the same); batch[i] and
batch.samples are then field 0. Raw fields are views into the I/O buffer,
zstd fields views into the batch's decoded buffer.
)doc";

constexpr const char* kLoaderDoc = R"doc(
Iterates over this rank's batches of one epoch, reading ahead through
io_uring (or a pread pool where io_uring is unavailable).

- volume: a dlfs.Volume or a path.
- batch_size: samples per batch; the last batch may be shorter unless drop_last.
- shuffle, seed: the epoch order is a pure function of (seed, epoch), the
  same on every rank; shuffle=False reads in volume order.
- rank, world_size: this process's shard. Samples are dealt round-robin;
  without drop_last the order is padded by wrapping (as
  torch DistributedSampler) so all ranks get the same number of batches.
- prefetch_batches: batches read ahead while you work on the current one;
  fewer (with a RuntimeWarning saying how much the buffers take, the
  figure stats()["buffer_pool_bytes"] reports) when their buffers would
  take more than an eighth of the memory this process may use (its cgroup's
  limit included), down to one batch. Where even that does not fit in three
  quarters of it, ValueError before reading: a smaller batch_size lowers it.
- queue_depth, io_threads, engine ("auto", "uring", "pread", "mmap"),
  direct_io: the I/O engine; engine_description says what runs. direct_io
  None reads with O_DIRECT unless the samples are much smaller than a block
  (where O_DIRECT would read 2.5 times their bytes or more, as 784-byte
  Fashion-MNIST images: then through the page cache, on a local disk as
  copies out of a mapping of the volume); True or False forces either.
  io_threads 0 (default): two where reads go through the page cache and
  the process has two cores to itself, else one (one in DataLoader workers).
- verify_checksums: check each sample's CRC32C; a mismatch raises
  CorruptVolumeError naming the sample and file. A sample from the node
  cache is checked the first time this process uses it, not every epoch.
- indices: read only these sample indices; the shuffle permutes within
  them. A range (e.g. vol.samples_under("train") when its samples are
  contiguous) holds nothing per sample; a list or array is the caller's.
- cache_budget: the node cache: bytes, or a size as --cache-budget takes it
  ("2G", "512M", "auto"). Samples read are kept in one
  shared-memory region per node and volume that every process reading the
  volume there uses (ranks, DataLoader workers, other jobs); cached samples
  are served from memory (same order, same checks, read-only views). It
  is filled by large sequential reads of the volume on a thread of its
  own, in storage order, until the budget is used. None: a quarter of what
  this job may use (MemAvailable and its memory cgroup's limit); a volume
  it holds whole is held from the first epoch when two or more epochs
  follow (epochs=), and not filled otherwise; up to 2 GiB it is filled
  before the first read, larger beside the first epoch, whose end waits
  for the rest. One it holds in part is filled only where that pays:
  when what the loop spent in the loader per byte (waiting for data,
  checking it), over the epochs still to come (those the fill itself
  lasts count half, as it runs beside them), beats what filling costs the
  loop (reading and copying, unless a core stayed idle), all measured once
  per node, so every rank of the node decides alike. A size (or
  $DLFS_CACHE_BUDGET) is a
  request for that cache: filled by the end of the first epoch whatever it
  costs. 0: off. A budget reduced to fit the limit, or a region that
  cannot be used, is said in a RuntimeWarning; stats()["cache_fill_plan"]
  says what was decided and why.
- epochs: the epochs this job will read (0: not said; the loader then
  assumes 11: a training run's tens of epochs). Decides whether the node
  cache holds the volume (with the costs measured, where it holds a part).
- cache_shared: False keeps the cache to this loader (no /dev/shm region).
- fields: a list of field names (format v2, e.g. ["jpg", "cls"]): each
  batch holds those fields of every sample, in that order (batch.fields,
  batch.field(i, f); batch[i] is field 0). Raw fields stay zero-copy, zstd
  ones are decompressed on the iterating thread (GIL released). Unknown
  names raise ValueError listing the volume's fields; a sample lacking a
  field raises (naming the sample and the field) for its batch. Needed for
  volumes whose samples have several fields; a volume of one compressed
  field (a --compress pack of images) hands its samples out decompressed
  without it.

- skip_bad_samples: a sample whose read, checksum or field decoding fails
  is left out of its batch (which is one shorter; nothing else moves) and
  listed by quarantine() as {volume, index, path, reason}, instead of the
  batch raising. The list goes into state_dict(), so a resumed run leaves
  the same samples out, and later epochs leave them out unread. Past
  max_bad_samples of them every batch raises CorruptVolumeError naming them.
- quarantine: samples to leave out from the start, with or without
  skip_bad_samples (not counted in max_bad_samples): indices, records with
  an "index" (quarantine()'s), or the document `dlfs verify --json` writes
  (json.load of it) or its "bad_samples". ValueError for anything else.

- A list of volumes (paths or Volume objects) is a weighted mixture:
  weights (default equal) say each volume's share of an epoch of
  epoch_samples samples (default: the most the weights allow before a
  volume runs out); cycle=True lets a smaller volume start over instead of
  refusing. Which volume each position comes from is a shuffle of the
  shares, a pure function of (seed, epoch), split across ranks like one
  volume's epoch; resuming (also elastically) works the same.
  batch.sources says each sample's volume (its position in the list),
  batch.indices its index there. Not with indices= or quarantine=.

stats() says where the time went: rings empty, reads in flight,
submit/wait/verify seconds, buffer memory, io_uring flags, and the node
cache (bytes, hits, misses, bytes filled and the time that took, processes
sharing it).

Call set_epoch(e) before iterating epoch e; each iter() restarts that epoch.
The GIL is released while waiting for I/O.

Resuming: state_dict() is where the iteration is (epoch, batches handed out)
and what decides the order (volume uuid, sample set, seed, shuffle,
batch_size, drop_last, rank, world_size), as a dict of ints, bools and
strings (torch.save / json can store it). load_state_dict(state) on a Loader
made with the same volume and options, in any process, continues with the
next batch, in the same order, without reading the batches before it; a
state from another volume, seed, shuffle or drop_last raises ValueError
naming what differs. Elastic resume: a Loader of another rank count or
batch size may load rank 0's state (every rank of a data-parallel job stops
at the same step); it reads its share of the samples of the epoch not yet
handed out, each once, and "segments" in its state lists the parts read
before (see "Long runs" in the README). After it, set_epoch(state["epoch"]) keeps the position (the usual
loop: for epoch in range(state["epoch"], epochs)); another epoch raises ValueError when the state
was taken in the middle of its epoch, rather than drop the rest of it silently
(set_epoch(e, discard_restored=True) drops it). "order" is the epoch order's version
(dlfs._dlfs.ORDER_VERSION; a state without it is order 1, the Fisher-Yates
order of earlier dlfs): a state of another order saved mid-epoch raises
ValueError saying how to resume at an epoch boundary instead.
)doc";

// Iteration state for Python: a Loader, a MixtureSource of several volumes
// or (comm=) a ShardLoader, plus the epoch the next iter() starts and each
// epoch's figures.
class PyLoader {
 public:
  explicit PyLoader(LoaderSetup setup) : job_(setup.job) {
    loader_ = MakeSource(std::move(setup), &parts_);
  }

  // After load_state_dict, setting the restored epoch keeps the restored
  // position (the usual loop sets the epoch before iterating it).
  void set_epoch(uint64_t e, bool discard_restored) { position_.set_epoch(e, discard_restored); }
  uint64_t epoch() const { return position_.epoch(); }
  void Start() {
    BatchSource& s = source();
    epochs_.Start(position_.epoch(), CountersOf(parts_));
    position_.Start(s, mu_);
  }

  std::shared_ptr<Batch> Next() {
    BatchSource& s = source();
    auto batch = std::make_shared<Batch>();
    Result<bool> more = false;
    {
      py::gil_scoped_release release;  // waiting for I/O
      std::lock_guard lock(mu_);
      more = s.Next(batch.get());
    }
    Check(more.status());
    if (!*more) {
      epochs_.Finish(CountersOf(parts_));
      throw py::stop_iteration();
    }
    epochs_.Count(*batch);
    return batch;
  }

  // Where the iteration is: the epoch set, and the batches of it handed out
  // (0 until it is iterated).
  py::dict State() { return StateDict(Unwrap(position_.Save(source(), mu_))); }
  void LoadState(const py::handle& state) {
    Check(position_.Load(source(), mu_, Unwrap(StateFromDict(state))));
  }

  // Releases threads, buffers and (comm=) the job's communicators; later
  // calls raise ValueError.
  void Close() {
    std::unique_ptr<BatchSource> gone;
    {
      std::lock_guard lock(mu_);
      gone = std::move(loader_);
      parts_ = SourceParts{};
    }
    py::gil_scoped_release release;  // joining the I/O threads
    gone.reset();
  }
  bool closed() const { return loader_ == nullptr; }

  BatchSource& source() {
    if (!loader_) throw py::value_error("the loader is closed");
    return *loader_;
  }
  const SourceParts& parts() const { return parts_; }
  // The Loader of each volume (none for a ShardLoader).
  const std::vector<Loader*>& loaders() const { return parts_.loaders; }
  MixtureSource* mixture() { return parts_.mixture; }
  py::list EpochStats() const { return epochs_.Records(CountersOf(parts_)); }

 private:
  std::shared_ptr<const MpiJob> job_;  // outlives loader_, which uses its communicator
  std::unique_ptr<BatchSource> loader_;
  SourceParts parts_;
  SourcePosition position_;
  EpochLog epochs_;
  std::mutex mu_;  // the source has one caller at a time
};

// A uint8 numpy view of field f of sample i (f = 0: sample(i)) whose base is
// the Python Batch.
py::array FieldView(py::object batch_obj, size_t i, size_t f) {
  const Batch& b = batch_obj.cast<const Batch&>();
  if (i >= b.size()) throw py::index_error("sample index out of range in batch");
  if (f >= b.field_count()) throw py::index_error("field index out of range in batch");
  const auto s = b.field(i, f);
  py::array a(py::dtype::of<uint8_t>(), {static_cast<py::ssize_t>(s.size())}, {1},
              reinterpret_cast<const uint8_t*>(s.data()), batch_obj);
  // Writable when the bytes are this batch's alone (torch.from_numpy then
  // takes them without a copy or a warning); read-only when they are shared.
  if (!b.owns_bytes()) {
    py::detail::array_proxy(a.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  return a;
}

py::array SampleView(py::object batch_obj, size_t i) { return FieldView(batch_obj, i, 0); }

// dlfs.Loader(...): the keywords through ResolveLoaderKeywords; a loader
// whose memory budget cut its read-ahead or its cache says so in a
// RuntimeWarning.
std::unique_ptr<PyLoader> MakeLoader(LoaderKeywords k) {
  auto loader = std::make_unique<PyLoader>(ResolveLoaderKeywords(std::move(k)));
  for (const Loader* one : loader->loaders()) {
    if (const std::string& note = one->cache_note(); !note.empty()) {
      if (PyErr_WarnEx(PyExc_RuntimeWarning, ("dlfs: " + note).c_str(), 1) != 0) {
        throw py::error_already_set();
      }
    }
  }
  return loader;
}

// Loader.stats(): where the time went.
py::dict StatsDict(const SourceStats& s) {
  py::dict d;
  d["ring_empty_seconds"] = s.ring_empty_seconds();
  d["reads_in_flight_seconds"] = s.io.in_flight_seconds;
  d["mean_reads_in_flight"] = s.io.mean_in_flight();
  d["submit_seconds"] = s.io.submit_seconds;
  d["reap_wait_seconds"] = s.io.wait_seconds;
  d["verify_seconds"] = s.verify_seconds;
  d["next_wait_seconds"] = s.next_wait_seconds;
  d["io_bytes"] = s.io.bytes;
  d["device_reads"] = s.io.ops;
  d["buffer_pool_bytes"] = s.buffer_bytes;
  d["cache_budget"] = s.cache_budget;
  d["cache_bytes"] = s.cache_bytes;
  d["cache_used_bytes"] = s.cache_used_bytes;
  d["cache_hits"] = s.cache_hits;
  d["cache_hit_bytes"] = s.cache_hit_bytes;
  d["cache_misses"] = s.cache_misses;
  d["cache_fill_bytes"] = s.cache_fill_bytes;
  d["cache_fill_seconds"] = s.cache_fill_seconds;
  d["cache_scan_bytes"] = s.cache_scan_bytes;
  d["cache_scan_seconds"] = s.cache_scan_seconds;
  d["cache_fill_cpu_seconds"] = s.cache_fill_cpu_seconds;
  d["cache_fill_plan"] = s.cache_fill_plan;
  d["cache_sharers"] = s.cache_sharers;
  d["cache_shared"] = s.cache_shared;
  d["setup_seconds"] = s.setup_seconds;
  d["io_uring_flags"] = s.uring_flags;
  return d;
}

void RegisterBatch(py::module_& m) {
  py::class_<Batch, std::shared_ptr<Batch>>(m, "Batch", kBatchDoc)
      .def("__len__", &Batch::size)
      .def(
          "__getitem__",
          [](py::object self, int64_t i) {
            const int64_t n = static_cast<int64_t>(self.cast<const Batch&>().size());
            if (i < 0) i += n;
            if (i < 0 || i >= n) throw py::index_error("sample index out of range in batch");
            return SampleView(self, static_cast<size_t>(i));
          },
          py::arg("i"), "Zero-copy uint8 view of the i-th sample.")
      .def_property_readonly(
          "samples",
          [](py::object self) {
            py::list out;
            const size_t n = self.cast<const Batch&>().size();
            for (size_t i = 0; i < n; ++i) out.append(SampleView(self, i));
            return out;
          },
          "List of zero-copy uint8 views, one per sample.")
      .def_property_readonly("field_count", &Batch::field_count,
                             "Fields per sample (the Loader's fields; 1 without).")
      .def(
          "field", [](py::object self, size_t i, size_t f) { return FieldView(self, i, f); },
          py::arg("i"), py::arg("f"), "Zero-copy uint8 view of field f of sample i.")
      .def_property_readonly(
          "fields",
          [](py::object self) {
            const Batch& b = self.cast<const Batch&>();
            py::tuple out(b.field_count());
            for (size_t f = 0; f < b.field_count(); ++f) {
              py::list views;
              for (size_t i = 0; i < b.size(); ++i) views.append(FieldView(self, i, f));
              out[f] = views;
            }
            return out;
          },
          "One list of zero-copy uint8 views per field, in the Loader's fields order.")
      .def_property_readonly(
          "indices",
          [](const Batch& b) {
            return py::array_t<int64_t>(static_cast<py::ssize_t>(b.size()),
                                        reinterpret_cast<const int64_t*>(b.indices().data()));
          },
          "Sample indices (int64 numpy array, a copy); of a mixture, within each sample's "
          "volume.")
      .def_property_readonly(
          "sources",
          [](const Batch& b) {
            py::array_t<int64_t> out(static_cast<py::ssize_t>(b.size()));
            auto w = out.mutable_unchecked<1>();
            const auto src = b.sources();
            for (size_t i = 0; i < b.size(); ++i) w(i) = src.empty() ? 0 : src[i];
            return out;
          },
          "Each sample's volume: its position in the list a mixture Loader was given "
          "(0 for a Loader of one volume).")
      .def_property_readonly(
          "labels",
          [](const Batch& b) {
            py::array_t<int64_t> out(static_cast<py::ssize_t>(b.size()));
            auto w = out.mutable_unchecked<1>();
            for (size_t i = 0; i < b.size(); ++i) {
              w(i) = b.label(i) == kNoLabel ? -1 : static_cast<int64_t>(b.label(i));
            }
            return out;
          },
          "Labels (int64 numpy array; -1 where a sample has none).")
      .def(
          "stack",
          [](const Batch& b) {
            const size_t n = b.size();
            const size_t len = n ? b.sample(0).size() : 0;
            for (size_t i = 1; i < n; ++i) {
              if (b.sample(i).size() != len) {
                throw py::value_error("samples differ in size (" + std::to_string(len) + " and " +
                                      std::to_string(b.sample(i).size()) +
                                      " bytes): use batch.samples");
              }
            }
            py::array_t<uint8_t> out({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(len)});
            uint8_t* dst = out.mutable_data();
            {
              py::gil_scoped_release release;
              for (size_t i = 0; i < n; ++i) std::memcpy(dst + i * len, b.sample(i).data(), len);
            }
            return out;
          },
          "All samples copied into one (len(batch), size) uint8 array; ValueError when they "
          "differ in size. One array instead of a list of views: cheaper to hand to torch when "
          "samples are fixed-size (raw pixels).")
      .def_property_readonly("epoch", &Batch::epoch)
      .def_property_readonly("sequence", &Batch::sequence, "Batch number within the epoch.")
      .def_property_readonly("payload_bytes", &Batch::payload_bytes);
}

}  // namespace

void RegisterLoader(py::module_& m) {
  RegisterBatch(m);

  // The signature line comes from the table of the loader's keywords.
  static const std::string doc =
      "\n" + SignatureLine<options::kLoaderKeywords>("Loader", "volume") + kLoaderDoc;
  py::class_<PyLoader> loader(m, "Loader", doc.c_str());
  DefLoaderInit<options::kLoaderKeywords>(loader, &MakeLoader);
  loader
      .def(
          "quarantine",
          [](PyLoader& l) {
            l.source();  // raises when closed
            py::list out;
            for (const Loader* one : l.loaders()) {
              out += QuarantineRecords(one->volume().path(), one->quarantine());
            }
            if (l.parts().shard_quarantine)
              out += QuarantineRecords("", l.parts().shard_quarantine());
            return out;
          },
          "Samples left out as bad: [{volume, index, path, reason}] (see skip_bad_samples).")
      .def("set_epoch", &PyLoader::set_epoch, py::arg("epoch"), py::arg("discard_restored") = false,
           "Sets the epoch the next iteration reads (its order depends on it). After "
           "load_state_dict() of a state taken in the middle of epoch E, set_epoch(E) keeps "
           "the restored position; another epoch raises ValueError, naming E, unless "
           "discard_restored=True says to leave the rest of E unread.")
      .def_property_readonly("epoch", &PyLoader::epoch)
      .def(
          "__len__", [](PyLoader& l) { return l.source().batches_per_epoch(); },
          "Batches per epoch for this rank.")
      .def("__iter__",
           [](PyLoader& l) -> PyLoader& {
             l.Start();
             return l;
           })
      .def("__next__", &PyLoader::Next)
      .def("state_dict", &PyLoader::State,
           "Where the iteration is and what decides the order, as a dict (see Loader).")
      .def("load_state_dict", &PyLoader::LoadState, py::arg("state"),
           "Continues from a state_dict(): the next batch is the one after those it counts.")
      .def("close", &PyLoader::Close,
           "Stops the loader's threads and frees its buffers (and, with comm=, its MPI "
           "communicators) now rather than when it is collected; later calls raise ValueError.")
      .def_property_readonly("closed", &PyLoader::closed)
      .def("__enter__", [](PyLoader& l) -> PyLoader& { return l; })
      .def("__exit__", [](PyLoader& l, const py::args&) { l.Close(); })
      .def_property_readonly(
          "indices",
          [](PyLoader& l) -> py::array_t<int64_t> {
            if (l.parts().shard_rank_indices) {
              const std::vector<uint64_t> idx = l.parts().shard_rank_indices(l.epoch());
              return py::array_t<int64_t>(static_cast<py::ssize_t>(idx.size()),
                                          reinterpret_cast<const int64_t*>(idx.data()));
            }
            l.source();
            return RankIndicesArray(l.mixture(), *l.loaders().front(), l.epoch());
          },
          "This rank's sample indices for the current epoch, in reading order (of a "
          "mixture: within each sample's volume, see sources).")
      .def_property_readonly(
          "sources",
          [](PyLoader& l) {
            l.source();
            std::vector<int64_t> src;
            if (l.mixture()) {
              for (const auto& [v, i] : l.mixture()->RankSamples(l.epoch())) src.push_back(v);
            } else if (l.parts().shard_rank_indices) {
              src.assign(l.parts().shard_rank_indices(l.epoch()).size(), 0);
            } else {
              src.assign(l.loaders().front()->RankIndices(l.epoch()).size(), 0);
            }
            return py::array_t<int64_t>(static_cast<py::ssize_t>(src.size()), src.data());
          },
          "For each of indices, the position of its volume in the list given (0 for one).")
      .def(
          "stats",
          [](PyLoader& l) {
            py::dict d = StatsDict(l.source().source_stats());
            if (l.parts().shard_stats) d["shard"] = l.parts().shard_stats();
            return d;
          },
          "Where the time went since the loader was created (see docs/benchmarks.md); with "
          "shard_local or cluster_cache, 'shard' holds the exchanges' counters.")
      .def("epoch_stats", &PyLoader::EpochStats,
           "Per epoch iterated in this process: {epoch, complete, batches, samples, seconds, "
           "payload_bytes, storage_bytes (read from storage), cache_bytes (found in this "
           "node's cache), peer_bytes (from other nodes), network_bytes (sent and received "
           "over MPI)}; the epoch in progress last.")
      .def_property_readonly(
          "engine_description", [](PyLoader& l) { return l.source().description(); },
          "What the I/O engine is, e.g. 'io_uring, O_DIRECT, ... queue depth 64'.");

  m.attr("ORDER_VERSION") = kOrderVersion;
  m.def(
      "_subset_crc", [](const py::object& indices) { return SubsetCrc(SubsetFromPython(indices)); },
      py::arg("indices"),
      "CRC32C of a loader's sample subset (a range or a sequence of indices), as its "
      "state_dict() has it.");
}

}  // namespace dlfs::python
