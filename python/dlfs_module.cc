// Python bindings: the `dlfs._dlfs` extension module. The pure-Python
// package `dlfs` (python/dlfs/) re-exports it and adds dlfs.torch.
//
// Conventions: every blocking call releases the GIL; every error Status
// becomes a Python exception through one translator (status_bridge.h);
// sample bytes handed out by the Loader are zero-copy numpy views whose
// base object keeps the C++ batch buffer alive.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <optional>

#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "dlfs/pack.h"
#include "dlfs/sample_reader.h"
#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "loader_keywords.h"
#include "shared_slots.h"
#include "state_dict.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs {
namespace {

using python::Check;
using python::ResolveLoaderKeywords;
using python::Unwrap;

py::object LabelOrNone(uint32_t label) {
  return label == kNoLabel ? py::object(py::none()) : py::object(py::int_(label));
}

// The same document as `dlfs info --json` (both come from SummarizeVolume).
py::dict InfoDict(const Volume& v) {
  const VolumeSummary s = SummarizeVolume(v);
  const VolumeInfo& i = s.info;
  py::list targets;
  for (size_t t = 0; t < i.target_details.size(); ++t) {
    const TargetInfo& ti = i.target_details[t];
    py::dict td;
    td["index"] = t;
    td["path"] = ti.path;
    td["stored_path"] = ti.stored_path;
    td["kind"] = std::string(NameOf(kTargetKindNames, ti.kind));
    td["size"] = ti.size;
    td["samples"] = s.usage[t].samples;
    td["bytes"] = s.usage[t].bytes;
    targets.append(td);
  }
  py::list fields;
  for (const FieldUsage& f : s.fields) {
    py::dict fd;
    fd["name"] = f.name;
    fd["samples"] = f.samples;
    fd["compressed"] = f.compressed;
    fd["stored_bytes"] = f.stored_bytes;
    fd["bytes"] = f.decoded_bytes;
    fields.append(fd);
  }
  py::dict d;
  d["path"] = s.path;
  d["format_version"] = i.format_version;
  d["uuid"] = i.uuid;
  d["samples"] = i.sample_count;
  d["directories"] = i.dir_count;
  d["bytes"] = i.data_bytes;
  d["volume_bytes"] = i.volume_size;
  d["directory_bytes"] = i.directory_bytes;
  d["alignment"] = i.data_alignment;
  d["classes"] = i.class_count;
  d["class_names"] = s.class_names;
  d["targets"] = i.targets;
  d["target_details"] = targets;
  d["created_unix_ns"] = i.created_unix_ns;
  d["incompat_flags"] = s.incompat_flags;
  d["fields"] = fields;
  d["dictionary_bytes"] = s.dictionary_bytes;
  return d;
}

py::bytes ReadSample(const Volume& v, int64_t index, bool verify) {
  if (index < 0) index += static_cast<int64_t>(v.size());
  if (index < 0 || static_cast<uint64_t>(index) >= v.size()) {
    throw py::index_error("sample index out of range (volume has " + std::to_string(v.size()) +
                          " samples)");
  }
  const uint64_t len = Unwrap(v.SampleSize(static_cast<uint64_t>(index)));
  py::bytes out(nullptr, static_cast<py::ssize_t>(len));  // filled in place
  auto* dst = reinterpret_cast<std::byte*>(PyBytes_AS_STRING(out.ptr()));
  Status st;
  {
    py::gil_scoped_release release;
    st = v.ReadInto(static_cast<uint64_t>(index), {dst, len}, verify);
  }
  Check(st);
  return out;
}

uint64_t CheckIndex(const Volume& v, int64_t index) {
  if (index < 0) index += static_cast<int64_t>(v.size());
  if (index < 0 || static_cast<uint64_t>(index) >= v.size()) {
    throw py::index_error("sample index out of range");
  }
  return static_cast<uint64_t>(index);
}

// Iteration state for Python: a Loader (or a MixtureSource of several
// volumes) plus the epoch the next iter() starts.
class PyLoader {
 public:
  // One Loader, or a MixtureSource of the volumes.
  explicit PyLoader(python::LoaderSetup setup) {
    if (!setup.mixture) {
      auto loader = Unwrap(Loader::Create(setup.volumes.front(), setup.options));
      loaders_ = {loader.get()};
      loader_ = std::move(loader);
      return;
    }
    auto mixture =
        Unwrap(MixtureSource::Create(std::move(setup.volumes), *setup.mixture, setup.options));
    for (size_t v = 0; v < setup.mixture->weights.size(); ++v) {
      loaders_.push_back(const_cast<Loader*>(&mixture->loader(v)));
    }
    mixture_ = mixture.get();
    loader_ = std::move(mixture);
  }

  // After load_state_dict, setting the restored epoch keeps the restored
  // position (the usual loop sets the epoch before iterating it).
  void set_epoch(uint64_t e) { position_.set_epoch(e); }
  uint64_t epoch() const { return position_.epoch(); }
  void Start() { position_.Start(*loader_, mu_); }

  std::shared_ptr<Batch> Next() {
    auto batch = std::make_shared<Batch>();
    Result<bool> more = false;
    {
      py::gil_scoped_release release;  // waiting for I/O
      std::lock_guard lock(mu_);
      more = loader_->Next(batch.get());
    }
    Check(more.status());
    if (!*more) throw py::stop_iteration();
    return batch;
  }

  // Where the iteration is: the epoch set, and the batches of it handed out
  // (0 until it is iterated).
  py::dict State() { return StateDict(Unwrap(position_.Save(*loader_, mu_))); }
  void LoadState(const py::handle& state) {
    Check(position_.Load(*loader_, mu_, Unwrap(StateFromDict(state))));
  }

  BatchSource& source() { return *loader_; }
  // The Loader of each volume (one without a mixture).
  const std::vector<Loader*>& loaders() const { return loaders_; }
  MixtureSource* mixture() { return mixture_; }

 private:
  std::unique_ptr<BatchSource> loader_;
  std::vector<Loader*> loaders_;
  MixtureSource* mixture_ = nullptr;
  SourcePosition position_;
  std::mutex mu_;  // the source has one caller at a time
};

// The per-process SampleReader of a Python Volume object, kept in its
// __dict__ (a reader does not survive fork: a child makes its own).
class PyReader {
 public:
  explicit PyReader(std::shared_ptr<Volume> vol)
      : pid_(::getpid()), reader_(Unwrap(SampleReader::Create(std::move(vol), {}))) {}
  pid_t pid() const { return pid_; }
  SampleReader& reader() { return *reader_; }

 private:
  pid_t pid_;
  std::unique_ptr<SampleReader> reader_;
};

SampleReader& ReaderOf(py::object volume_obj) {
  py::dict d = volume_obj.attr("__dict__");
  if (d.contains("_reader")) {
    PyReader& r = d["_reader"].cast<PyReader&>();
    if (r.pid() == ::getpid()) return r.reader();
    // Inherited from the parent: keep it alive but unused (destroying it
    // here would touch the parent's I/O state).
    static py::list* inherited = new py::list();
    inherited->append(d["_reader"]);
  }
  auto vol = volume_obj.cast<std::shared_ptr<Volume>>();
  py::object r = py::cast(std::make_unique<PyReader>(std::move(vol)));
  d["_reader"] = r;
  return r.cast<PyReader&>().reader();
}

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

}  // namespace

// The decode module's classes (python/decode_bindings.cc).
void RegisterDecodeBindings(py::module_& m);
// dlfs.Writer's engine, Volume.close/slicing/read_array, __version__
// (python/writer_bindings.cc).
void RegisterAdoptionBindings(py::module_& m);
}  // namespace dlfs

PYBIND11_MODULE(_dlfs, m) {
  using namespace dlfs;
  m.doc() = "dlfs: packed sample volumes and a fast shuffled batch loader (C++ core).";

  python::RegisterStatusBridge(m);

  py::class_<PyReader>(m, "_SampleReader");

  // VolumeDataset's shared batch memory (shared_slots.h).
  py::class_<SharedSlots>(
      m, "_SharedSlots", "Shared batch memory of a DataLoader worker (VolumeDataset batched mode).")
      .def(py::init([](uint32_t slots, uint64_t slot_bytes) {
             return Unwrap(SharedSlots::Create(slots, slot_bytes));
           }),
           py::arg("slots"), py::arg("slot_bytes"))
      .def_property_readonly("fd", &SharedSlots::fd)
      .def_property_readonly("total", &SharedSlots::total)
      .def_property_readonly("slot_bytes", &SharedSlots::slot_bytes)
      .def(
          "acquire",
          [](SharedSlots& s, double timeout) {
            py::gil_scoped_release release;
            return s.Acquire(timeout);
          },
          py::arg("timeout"))
      .def("release", &SharedSlots::Release, py::arg("slot"))
      .def(
          "read",
          [](SharedSlots& s, py::object volume, uint32_t slot, std::vector<uint64_t> indices,
             bool verify) -> py::object {
            SampleReader& reader = ReaderOf(volume);
            Result<Batch> r = Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              auto need = reader.BufferBytes(indices);
              if (need.ok() && *need > s.slot_bytes()) return py::none();  // does not fit
              r = need.ok() ? reader.ReadInto(indices, s.Slot(slot), verify) : need.status();
            }
            const Batch b = Unwrap(std::move(r));
            py::list offsets, lengths;
            for (size_t i = 0; i < b.size(); ++i) {
              offsets.append(b.sample(i).data() - s.Slot(slot).data());
              lengths.append(b.sample(i).size());
            }
            return py::make_tuple(offsets, lengths);
          },
          py::arg("volume"), py::arg("slot"), py::arg("indices"), py::arg("verify") = true,
          "Reads the samples into slot `slot`: (offsets, lengths), or None when they do not fit.");

  py::class_<SlotLease, std::shared_ptr<SlotLease>>(m, "_SlotLease", py::buffer_protocol())
      .def_buffer([](SlotLease& l) {
        // Writable, like the copies DataLoader makes of samples sent the
        // ordinary way: the batch is the caller's to use as it likes.
        return py::buffer_info(l.data(), 1, py::format_descriptor<uint8_t>::format(), 1,
                               {static_cast<py::ssize_t>(l.slot_bytes())}, {1},
                               /*readonly=*/false);
      });
  m.def(
      "_attach_slot",
      [](int pid, int fd, uint64_t total, uint64_t slot_bytes, uint32_t slot) {
        return Unwrap(AttachSlot(pid, fd, total, slot_bytes, slot));
      },
      py::arg("pid"), py::arg("fd"), py::arg("total"), py::arg("slot_bytes"), py::arg("slot"),
      "Maps slot `slot` of DataLoader worker `pid`'s shared batch memory.");

  py::class_<Volume, std::shared_ptr<Volume>>(m, "Volume", py::dynamic_attr(), R"doc(
An open dlfs volume (read-only).

Volume(path) reads the superblock and the whole sample directory, verifying
their checksums; a damaged or foreign file raises CorruptVolumeError, a
missing one FileNotFoundError. A volume of several targets is opened from
its target 0, which names the others; target_map={1: "/dev/nvme1n1"} looks
for target 1 there instead.

    vol = dlfs.Volume("fashion-mnist.dlfs")
    data, label = vol[42]          # bytes, int (None when unlabelled)
    vol.path(42), vol.lookup("train/00042"), vol.classes
)doc")
      .def(py::init([](const std::string& path,
                       std::optional<std::map<uint32_t, std::string>> target_map) {
             VolumeOpenOptions options;
             if (target_map) options.target_map = std::move(*target_map);
             py::gil_scoped_release release;
             auto v = Volume::Open(path, options);
             py::gil_scoped_acquire acquire;
             return Unwrap(std::move(v));
           }),
           py::arg("path"), py::arg("target_map") = py::none())
      .def("__len__", &Volume::size, "Number of samples.")
      .def(
          "__getitem__",
          [](const Volume& v, int64_t i) {
            py::bytes data = ReadSample(v, i, true);
            return py::make_tuple(data, LabelOrNone(v.directory().label(CheckIndex(v, i))));
          },
          py::arg("index"),
          "(bytes, label) of sample `index`; the checksum is verified. label is None when the "
          "sample has none.")
      .def("read", &ReadSample, py::arg("index"), py::arg("verify") = true,
           "The bytes of sample `index` as packed (checksum verified unless verify=False; "
           "decompressed when stored compressed). A volume whose samples have several fields "
           "refuses, listing them: use read_field / read_fields.")
      .def(
          "read_field",
          [](const Volume& v, int64_t i, const std::string& field, bool verify) {
            const uint64_t index = CheckIndex(v, i);
            Result<std::vector<std::byte>> r = Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              r = v.Read(index, std::string_view(field), verify);
            }
            const std::vector<std::byte> b = Unwrap(std::move(r));
            return py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
          },
          py::arg("index"), py::arg("field"), py::arg("verify") = true,
          "Field `field` (e.g. 'json') of sample `index`, decompressed and checked; an error "
          "naming the sample when it lacks the field.")
      .def(
          "read_fields",
          [](const Volume& v, int64_t i, bool verify) {
            const uint64_t index = CheckIndex(v, i);
            Result<std::vector<std::pair<std::string, std::vector<std::byte>>>> r =
                Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              r = v.ReadFields(index, verify);
            }
            py::dict out;
            for (const auto& [name, b] : Unwrap(std::move(r))) {
              out[py::str(name)] = py::bytes(reinterpret_cast<const char*>(b.data()), b.size());
            }
            return out;
          },
          py::arg("index"), py::arg("verify") = true,
          "{field name: bytes} of sample `index`, decompressed, in storage order (a volume "
          "without fields gives {'': bytes}).")
      .def(
          "extent",
          [](const Volume& v, int64_t i) {
            const SampleInfo s = v.directory().sample(CheckIndex(v, i));
            return py::make_tuple(s.target, s.offset, s.length);
          },
          py::arg("index"),
          "(target, offset, length): where sample `index`'s stored bytes are in its target file "
          "(compressed ones as stored).")
      .def_property_readonly(
          "fields",
          [](const Volume& v) {
            std::vector<std::string> names;
            const SampleDirectory& d = v.directory();
            if (!d.has_fields()) return names;
            for (uint32_t f = 0; f < d.field_count(); ++f) names.emplace_back(d.field_name(f));
            return names;
          },
          "The volume's field names, sorted ([] for a volume without fields).")
      .def(
          "read_many",
          [](py::object self, std::vector<int64_t> indices, bool verify) {
            const Volume& v = self.cast<const Volume&>();
            std::vector<uint64_t> idx;
            idx.reserve(indices.size());
            for (int64_t i : indices) idx.push_back(CheckIndex(v, i));
            SampleReader& reader = ReaderOf(self);
            Result<Batch> r = Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              r = reader.Read(idx, verify);
            }
            return std::make_shared<Batch>(Unwrap(std::move(r)));
          },
          py::arg("indices"), py::arg("verify") = true, R"doc(
The samples `indices` (any order, duplicates allowed) in one submission,
as a Batch: batch[i] is a zero-copy uint8 view of sample indices[i],
batch.labels their labels. Reads go through this process's own io_uring
ring with O_DIRECT (no page cache copy) and are coalesced where samples are
neighbours; checksums are verified. Use it when you have a batch of
indices at once (a BatchSampler); for whole epochs use dlfs.Loader.)doc")
      .def(
          "path", [](const Volume& v, int64_t i) { return v.directory().Path(CheckIndex(v, i)); },
          py::arg("index"), "Path of sample `index` inside the volume, e.g. 'train/00042'.")
      .def(
          "label",
          [](const Volume& v, int64_t i) {
            return LabelOrNone(v.directory().label(CheckIndex(v, i)));
          },
          py::arg("index"), "Label (class id) of sample `index`, or None.")
      .def(
          "size", [](const Volume& v, int64_t i) { return Unwrap(v.SampleSize(CheckIndex(v, i))); },
          py::arg("index"), "Size in bytes of sample `index` as read (decompressed).")
      .def(
          "_buffer_bytes",
          [](py::object self, std::vector<uint64_t> indices) {
            return Unwrap(ReaderOf(self).BufferBytes(indices));
          },
          py::arg("indices"), "Bytes read_many(indices) needs in shared memory (internal).")
      .def(
          "lookup",
          [](const Volume& v, const std::string& path) {
            return Unwrap(v.directory().Lookup(path));
          },
          py::arg("path"), "Index of the sample at `path`; KeyError if there is none.")
      .def_property_readonly(
          "classes",
          [](const Volume& v) {
            std::vector<std::string> names;
            for (uint64_t c = 0; c < v.directory().class_count(); ++c) {
              names.emplace_back(v.directory().class_name(c));
            }
            return names;
          },
          "Class names, indexed by label.")
      .def_property_readonly(
          "labels",
          [](const Volume& v) {
            py::array_t<int64_t> out(static_cast<py::ssize_t>(v.size()));
            auto w = out.mutable_unchecked<1>();
            for (uint64_t i = 0; i < v.size(); ++i) {
              const uint32_t l = v.directory().label(i);
              w(i) = l == kNoLabel ? -1 : static_cast<int64_t>(l);
            }
            return out;
          },
          "All labels as an int64 numpy array (-1 where a sample has none).")
      .def(
          "indices",
          [](const Volume& v, const std::string& dir) {
            const PathEntry e = Unwrap(v.directory().Resolve(dir));
            if (!e.is_dir) Check(Status::InvalidArgument("'" + dir + "' is a sample"));
            const std::vector<uint64_t> idx = v.directory().SamplesUnder(e.index);
            return py::array_t<int64_t>(static_cast<py::ssize_t>(idx.size()),
                                        reinterpret_cast<const int64_t*>(idx.data()));
          },
          py::arg("dir") = "",
          "Indices of every sample under directory `dir` (recursively), ascending.")
      .def_property_readonly("filename", &Volume::path, "The volume file.")
      .def("info", &InfoDict,
           "Summary: samples, bytes, classes, format_version, targets, incompat_flags, "
           "fields (name, samples, compressed, stored_bytes, bytes), ...")
      .def(
          "verify",
          [](const Volume& v) {
            std::vector<std::string> bad;
            VerifyReport report;
            VerifyOptions o;
            o.on_bad_sample = [&](uint64_t, const Status& s) { bad.push_back(s.message()); };
            Status st;
            {
              py::gil_scoped_release release;
              st = VerifyVolume(v, o, &report);
            }
            Check(st);
            return bad;
          },
          "Checks every sample's checksum; returns the list of problems (empty when intact).")
      .def("__repr__", [](const Volume& v) {
        return "<dlfs.Volume '" + v.path() + "' with " + std::to_string(v.size()) + " samples>";
      });

  py::class_<Batch, std::shared_ptr<Batch>>(m, "Batch", R"doc(
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
)doc")
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

  // Every keyword default comes from LoaderOptions (written once, in C++).
  static const LoaderOptions kDefaults;
  py::class_<PyLoader>(m, "Loader", R"doc(
Loader(volume, batch_size, shuffle=True, seed=0, rank=0, world_size=1,
       drop_last=False, prefetch_batches=4, queue_depth=64, io_threads=1,
       engine="auto", direct_io=True, verify_checksums=True, coalesce=True,
       indices=None, cache_budget=None, fields=None, cache_shared=True,
       skip_bad_samples=False, max_bad_samples=16, quarantine=None,
       weights=None, epoch_samples=0, cycle=False)

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
  fewer (with a RuntimeWarning) when their buffers would take more than an
  eighth of the memory this process may use (its cgroup's limit included).
- queue_depth, io_threads, engine ("auto", "uring", "pread"), direct_io:
  the I/O engine; engine_description says what runs.
- verify_checksums: check each sample's CRC32C; a mismatch raises
  CorruptVolumeError naming the sample and file.
- indices: read only these sample indices (e.g. vol.indices("train")); the
  shuffle permutes within them.
- cache_budget: the node cache (bytes). Samples read are kept in one
  shared-memory region per node and volume that every process reading the
  volume there uses (ranks, DataLoader workers, other jobs); cached samples
  are served from memory (same order, same checks, read-only views). It
  fills from the epochs' own reads on a lowest-priority thread, so it never
  slows an epoch; when the samples exceed the budget the first that fit
  stay. None: a quarter of what this job may use (MemAvailable and its
  memory cgroup's limit; $DLFS_CACHE_BUDGET sets it); 0: off. A budget
  reduced to fit the limit, or a region that cannot be used, is said in a
  RuntimeWarning.
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
- quarantine: samples to leave out from the start: indices, or the records
  of `dlfs verify --json` or quarantine() (not counted in max_bad_samples).

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
loop); another epoch starts afresh.
)doc")
      .def(
          py::init(
              [](py::object volume, uint32_t batch_size, bool shuffle, uint64_t seed, uint32_t rank,
                 uint32_t world_size, bool drop_last, uint32_t prefetch_batches,
                 uint32_t queue_depth, uint32_t io_threads, const std::string& engine,
                 bool direct_io, bool verify_checksums, bool coalesce,
                 std::optional<std::vector<uint64_t>> indices, std::optional<uint64_t> cache_budget,
                 std::optional<std::vector<std::string>> fields, bool cache_shared,
                 bool skip_bad_samples, uint32_t max_bad_samples, py::object quarantine,
                 std::optional<std::vector<double>> weights, uint64_t epoch_samples, bool cycle) {
                auto loader = std::make_unique<PyLoader>(ResolveLoaderKeywords({
                    .volume = volume,
                    .batch_size = batch_size,
                    .shuffle = shuffle,
                    .seed = seed,
                    .rank = rank,
                    .world_size = world_size,
                    .drop_last = drop_last,
                    .prefetch_batches = prefetch_batches,
                    .queue_depth = queue_depth,
                    .io_threads = io_threads,
                    .engine = engine,
                    .direct_io = direct_io,
                    .verify_checksums = verify_checksums,
                    .coalesce = coalesce,
                    .indices = std::move(indices),
                    .cache_budget = cache_budget,
                    .fields = std::move(fields),
                    .cache_shared = cache_shared,
                    .skip_bad_samples = skip_bad_samples,
                    .max_bad_samples = max_bad_samples,
                    .quarantine = quarantine,
                    .weights = std::move(weights),
                    .epoch_samples = epoch_samples,
                    .cycle = cycle,
                }));
                for (const Loader* one : loader->loaders()) {
                  if (const std::string& note = one->cache_note(); !note.empty()) {
                    if (PyErr_WarnEx(PyExc_RuntimeWarning, ("dlfs: " + note).c_str(), 1) != 0) {
                      throw py::error_already_set();
                    }
                  }
                }
                return loader;
              }),
          py::arg("volume"), py::arg("batch_size"), py::arg("shuffle") = kDefaults.sampler.shuffle,
          py::arg("seed") = kDefaults.sampler.seed, py::arg("rank") = kDefaults.sampler.rank,
          py::arg("world_size") = kDefaults.sampler.world_size,
          py::arg("drop_last") = kDefaults.sampler.drop_last,
          py::arg("prefetch_batches") = kDefaults.prefetch_batches,
          py::arg("queue_depth") = kDefaults.engine.queue_depth,
          py::arg("io_threads") = kDefaults.io_threads,
          py::arg("engine") = std::string(EngineKindName(kDefaults.engine.kind)),
          py::arg("direct_io") = kDefaults.engine.direct_io,
          py::arg("verify_checksums") = kDefaults.verify_checksums,
          py::arg("coalesce") = kDefaults.plan.coalesce, py::arg("indices") = py::none(),
          py::arg("cache_budget") = py::none(), py::arg("fields") = py::none(),
          py::arg("cache_shared") = kDefaults.cache_shared,
          py::arg("skip_bad_samples") = kDefaults.skip_bad_samples,
          py::arg("max_bad_samples") = kDefaults.max_bad_samples,
          py::arg("quarantine") = py::none(), py::arg("weights") = py::none(),
          py::arg("epoch_samples") = 0, py::arg("cycle") = false)
      .def(
          "quarantine",
          [](PyLoader& l) {
            py::list out;
            for (const Loader* one : l.loaders()) {
              out += QuarantineRecords(one->volume().path(), one->quarantine());
            }
            return out;
          },
          "Samples left out as bad: [{volume, index, path, reason}] (see skip_bad_samples).")
      .def("set_epoch", &PyLoader::set_epoch, py::arg("epoch"),
           "Sets the epoch the next iteration reads (its order depends on it).")
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
      .def_property_readonly(
          "indices",
          [](PyLoader& l) {
            std::vector<uint64_t> idx;
            if (l.mixture()) {
              for (const auto& [v, i] : l.mixture()->RankSamples(l.epoch())) idx.push_back(i);
            } else {
              idx = l.loaders().front()->RankIndices(l.epoch());
            }
            return py::array_t<int64_t>(static_cast<py::ssize_t>(idx.size()),
                                        reinterpret_cast<const int64_t*>(idx.data()));
          },
          "This rank's sample indices for the current epoch, in reading order (of a "
          "mixture: within each sample's volume, see sources).")
      .def_property_readonly(
          "sources",
          [](PyLoader& l) {
            std::vector<int64_t> src;
            if (l.mixture()) {
              for (const auto& [v, i] : l.mixture()->RankSamples(l.epoch())) src.push_back(v);
            } else {
              src.assign(l.loaders().front()->RankIndices(l.epoch()).size(), 0);
            }
            return py::array_t<int64_t>(static_cast<py::ssize_t>(src.size()), src.data());
          },
          "For each of indices, the position of its volume in the list given (0 for one).")
      .def(
          "stats",
          [](PyLoader& l) {
            const SourceStats s = l.source().source_stats();
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
            d["cache_bytes"] = s.cache_bytes;
            d["cache_used_bytes"] = s.cache_used_bytes;
            d["cache_hits"] = s.cache_hits;
            d["cache_misses"] = s.cache_misses;
            d["cache_fill_bytes"] = s.cache_fill_bytes;
            d["cache_fill_seconds"] = s.cache_fill_seconds;
            d["cache_sharers"] = s.cache_sharers;
            d["cache_shared"] = s.cache_shared;
            d["setup_seconds"] = s.setup_seconds;
            d["io_uring_flags"] = s.uring_flags;
            return d;
          },
          "Where the time went since the loader was created (see docs/benchmarks.md).")
      .def_property_readonly(
          "engine_description", [](PyLoader& l) { return l.source().description(); },
          "What the I/O engine is, e.g. 'io_uring, O_DIRECT, ... queue depth 64'.");

  m.def(
      "pack",
      [](const std::string& source, const std::string& output, const std::string& source_kind,
         bool force, uint32_t align, bool skip_unreadable, std::vector<std::string> class_names,
         bool all_files, std::optional<py::function> on_progress) {
        PackOptions o;
        o.from = Unwrap(ParseSourceKind(source_kind));
        o.volume.overwrite = force;
        o.volume.align = align;
        o.skip_unreadable = skip_unreadable;
        o.class_names = std::move(class_names);
        o.all_files = all_files;
        // Every ~100 ms: Ctrl-C (and an exception in on_progress) stops
        // packing, leaving nothing behind, and is raised here.
        std::atomic<bool> cancel{false};
        std::optional<py::error_already_set> py_error;
        o.cancel = &cancel;
        o.on_progress = [&](const PackProgress& p) {
          py::gil_scoped_acquire acquire;
          if (py_error) return;
          try {
            if (PyErr_CheckSignals() != 0) throw py::error_already_set();
            if (!on_progress) return;
            py::dict d;
            d["samples"] = p.samples;
            d["bytes"] = p.bytes;
            d["skipped"] = p.skipped;
            d["total_samples"] = p.total_samples;
            d["source_bytes"] = p.source_bytes;
            d["total_source_bytes"] = p.total_source_bytes;
            d["seconds"] = p.seconds;
            (*on_progress)(d);
          } catch (py::error_already_set& e) {
            py_error.emplace(std::move(e));
            cancel = true;
          }
        };
        Result<PackStats> r = Status::Cancelled("not run");
        {
          py::gil_scoped_release release;
          r = Pack(source, output, o);
        }
        if (py_error) throw std::move(*py_error);
        const PackStats s = Unwrap(std::move(r));
        py::dict d;
        d["source_kind"] = std::string(SourceKindName(s.from));
        d["samples"] = s.samples;
        d["bytes"] = s.bytes;
        d["classes"] = s.classes;
        d["skipped"] = s.skipped;
        d["removed_temporaries"] = s.removed_temporaries;  // of killed earlier packs
        d["ignored"] = s.ignored();
        d["ignored_examples"] = s.ignored_examples;
        d["seconds"] = s.seconds;
        return d;
      },
      py::arg("source"), py::arg("output"), py::arg("source_kind") = "auto",
      py::arg("force") = false, py::arg("align") = PackOptions{}.volume.align,
      py::arg("skip_unreadable") = false, py::arg("class_names") = std::vector<std::string>{},
      py::arg("all_files") = false, py::arg("on_progress") = py::none(),
      R"doc(Packs a data set into a new volume (like `dlfs pack`) and returns stats.

source_kind: "auto", "imagefolder", "idx" or "tar". Raises FileExistsError if
output exists and force is False. all_files: imagefolder packs every file,
not only what torchvision's ImageFolder loads. on_progress(dict) is called
about every 100 ms (samples, bytes, total_samples, ...); dlfs.pack's
progress=True uses it. Ctrl-C stops packing and leaves no volume.)doc");

  m.def(
      "_subset_crc", [](const std::vector<uint64_t>& indices) { return SubsetCrc(indices); },
      py::arg("indices"), "CRC32C of a loader's sample subset, as its state_dict() has it.");

  RegisterDecodeBindings(m);
  RegisterAdoptionBindings(m);
}
