// Python bindings added for adoption (issue 14), kept apart from
// dlfs_module.cc: the engine of dlfs.Writer (python/dlfs/writer.py), Volume
// as a context manager with close(), Volume slicing and writable reads, and
// the module's __version__. Errors go through `throw_status`, so they
// become the same exceptions as everywhere else in the module.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/version.h"
#include "dlfs/volume.h"

namespace py = pybind11;

namespace dlfs {

namespace {

void (*g_throw_status)(const Status&) = nullptr;

void Check(const Status& st) {
  if (!st.ok()) g_throw_status(st);
}

template <typename T>
T Unwrap(Result<T> r) {
  Check(r.status());
  return std::move(r).value();
}

// A contiguous read-only view of any object with the buffer protocol
// (bytes, bytearray, memoryview, a C-contiguous numpy array of any dtype),
// held for the life of this object.
class ByteView {
 public:
  explicit ByteView(const py::handle& obj) {
    if (PyObject_GetBuffer(obj.ptr(), &view_, PyBUF_SIMPLE) != 0) throw py::error_already_set();
  }
  ~ByteView() { PyBuffer_Release(&view_); }
  ByteView(const ByteView&) = delete;
  ByteView& operator=(const ByteView&) = delete;

  std::span<const std::byte> bytes() const {
    return {static_cast<const std::byte*>(view_.buf), static_cast<size_t>(view_.len)};
  }

 private:
  Py_buffer view_{};
};

// dlfs.Writer's engine: a VolumeBuilder fed from Python buffers. Not
// thread-safe (the Python Writer is used from one thread, as the builder).
class PyWriter {
 public:
  PyWriter(const std::string& path, uint32_t targets, uint32_t alignment, bool force,
           std::vector<std::string> class_names, const std::string& compress, bool dict)
      : path_(path) {
    VolumeBuilder::Options o;
    o.targets = targets;
    o.align = alignment;
    o.overwrite = force;
    Result<VolumeBuilder::Options::Compression> compression = ParseCompression(compress, dict);
    Check(compression.status());
    o.compress = std::move(*compression);
    Result<std::unique_ptr<VolumeBuilder>> r = Status::Cancelled("not run");
    {
      py::gil_scoped_release release;
      r = VolumeBuilder::Create(path, o);
    }
    Check(r.status());
    builder_ = std::move(r).value();
    if (!class_names.empty()) builder_->SetClassNames(std::move(class_names));
  }

  // Streams `data` into the volume as sample `sample_path`. label: -1 for
  // none. Errors name the volume and the sample; a refused sample leaves
  // the writer usable.
  void Add(const std::string& sample_path, const py::handle& data, int64_t label) {
    VolumeBuilder& b = Builder();
    if (label < -1 || label >= int64_t{kNoLabel} - 1) {
      Check(Status::InvalidArgument(path_ + ": sample '" + sample_path + "': label " +
                                    std::to_string(label) + " out of range"));
    }
    const uint32_t l = label < 0 ? kNoLabel : static_cast<uint32_t>(label);
    // A dict is the sample's fields (format v2), in its order.
    std::vector<std::string> names;
    std::vector<std::unique_ptr<ByteView>> views;
    if (py::isinstance<py::dict>(data)) {
      for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(data)) {
        names.push_back(k.cast<std::string>());
        views.push_back(std::make_unique<ByteView>(v));
      }
    } else {
      views.push_back(std::make_unique<ByteView>(data));
    }
    const bool fields = py::isinstance<py::dict>(data);
    Status st;
    {
      py::gil_scoped_release release;
      st = b.BeginSample(sample_path, l);  // bad or duplicate path: names it
      if (!st.ok()) {
        st = st.WithContext(path_);
      } else {
        for (size_t k = 0; k < views.size() && st.ok(); ++k) {
          st = fields ? b.AddField(names[k], views[k]->bytes()) : b.Append(views[k]->bytes());
        }
        if (st.ok()) st = b.EndSample();
        if (!st.ok()) {
          b.AbortSample();
          st = st.WithContext(path_ + ": sample '" + sample_path + "'");
        }
      }
    }
    Check(st);
  }

  // Publishes the volume; the writer is closed afterwards, whatever happens.
  void Close() {
    Builder();  // refuses a closed writer
    std::unique_ptr<VolumeBuilder> b = std::move(builder_);
    Status st;
    {
      py::gil_scoped_release release;
      st = b->Finish();
      b.reset();
    }
    Check(st);
  }

  // Drops everything written so far: no volume, no temporary files.
  void Abort() {
    std::unique_ptr<VolumeBuilder> b = std::move(builder_);
    py::gil_scoped_release release;
    b.reset();
  }

  bool closed() const { return builder_ == nullptr; }
  uint64_t samples() const { return builder_ ? builder_->sample_count() : 0; }
  uint64_t bytes() const { return builder_ ? builder_->data_bytes() : 0; }
  std::vector<std::string> temp_paths() const {
    return builder_ ? builder_->temp_paths() : std::vector<std::string>{};
  }
  const std::string& path() const { return path_; }

 private:
  VolumeBuilder& Builder() {
    if (!builder_) Check(Status::InvalidArgument(path_ + ": the writer is closed"));
    return *builder_;
  }

  std::string path_;
  std::unique_ptr<VolumeBuilder> builder_;
};

// The samples of `s` over `v`: a list of (bytes, label) as vol[i] gives.
py::list ReadSlice(const Volume& v, const py::slice& s) {
  size_t start = 0, stop = 0, step = 0, n = 0;
  if (!s.compute(v.size(), &start, &stop, &step, &n)) throw py::error_already_set();
  py::list out;
  for (size_t k = 0, i = start; k < n; ++k, i += step) {
    const uint64_t len = Unwrap(v.SampleSize(i));
    py::bytes data(nullptr, static_cast<py::ssize_t>(len));  // filled in place
    char* dst = PyBytes_AS_STRING(data.ptr());
    Status st;
    {
      py::gil_scoped_release release;
      st = v.ReadInto(i, {reinterpret_cast<std::byte*>(dst), len}, true);
    }
    Check(st);
    const uint32_t label = v.directory().label(i);
    out.append(py::make_tuple(
        data, label == kNoLabel ? py::object(py::none()) : py::object(py::int_(label))));
  }
  return out;
}

}  // namespace

void RegisterAdoptionBindings(py::module_& m, void (*throw_status)(const Status&)) {
  g_throw_status = throw_status;
  m.attr("__version__") = DLFS_VERSION_STRING;

  py::class_<PyWriter>(m, "_VolumeWriter",
                       "The engine of dlfs.Writer (see help(dlfs.Writer)); use that instead.")
      .def(py::init<const std::string&, uint32_t, uint32_t, bool, std::vector<std::string>,
                    const std::string&, bool>(),
           py::arg("path"), py::arg("targets"), py::arg("alignment"), py::arg("force"),
           py::arg("class_names"), py::arg("compress") = "", py::arg("dict") = false)
      .def("add", &PyWriter::Add, py::arg("path"), py::arg("data"), py::arg("label"))
      .def("close", &PyWriter::Close)
      .def("abort", &PyWriter::Abort)
      .def_property_readonly("closed", &PyWriter::closed)
      .def_property_readonly("samples", &PyWriter::samples)
      .def_property_readonly("bytes", &PyWriter::bytes)
      .def_property_readonly("temp_paths", &PyWriter::temp_paths)
      .def_property_readonly("path", &PyWriter::path);

  // Volume: a context manager, slicing, writable reads (the class itself is
  // defined in dlfs_module.cc).
  auto volume =
      py::reinterpret_borrow<py::class_<Volume, std::shared_ptr<Volume>>>(m.attr("Volume"));
  volume
      .def(py::init([](const py::object& path,
                       std::optional<std::map<uint32_t, std::string>> target_map) {
             // Any path-like object (pathlib.Path, ...), as open() takes.
             const std::string p =
                 py::str(py::module_::import("os").attr("fsdecode")(path)).cast<std::string>();
             VolumeOpenOptions options;
             if (target_map) options.target_map = std::move(*target_map);
             Result<std::shared_ptr<Volume>> v = Status::Cancelled("not run");
             {
               py::gil_scoped_release release;
               v = Volume::Open(p, options);
             }
             Check(v.status());
             return std::move(v).value();
           }),
           py::arg("path"), py::arg("target_map") = py::none())
      .def(
          "close", [](Volume& v) { v.Close(); },
          "Closes the volume's files now (also at the end of a `with` block). Reading "
          "samples afterwards raises ValueError; len(), path(), labels and classes still "
          "work, and Loaders made from the volume are unaffected.")
      .def_property_readonly("closed", &Volume::closed, "True after close().")
      .def("__enter__", [](py::object self) { return self; })
      .def("__exit__",
           [](Volume& v, const py::args&) {
             v.Close();
             return false;
           })
      .def("__getitem__", &ReadSlice, py::arg("slice"),
           "vol[a:b:c]: a list of (bytes, label), as vol[i] for each i of the slice.")
      .def(
          "__getitem__",
          [](const Volume&, const py::object& key) -> py::object {
            throw py::type_error("dlfs.Volume indices must be integers or slices, not " +
                                 std::string(Py_TYPE(key.ptr())->tp_name) +
                                 " (a path inside the volume: vol[vol.lookup(path)])");
          },
          py::arg("key"))
      .def(
          "read_array",
          [](const Volume& v, int64_t index, bool verify) {
            if (index < 0) index += static_cast<int64_t>(v.size());
            if (index < 0 || static_cast<uint64_t>(index) >= v.size()) {
              throw py::index_error("sample index out of range (volume has " +
                                    std::to_string(v.size()) + " samples)");
            }
            const uint64_t len = Unwrap(v.SampleSize(static_cast<uint64_t>(index)));
            py::array_t<uint8_t> out(static_cast<py::ssize_t>(len));
            auto* dst = reinterpret_cast<std::byte*>(out.mutable_data());
            Status st;
            {
              py::gil_scoped_release release;
              st = v.ReadInto(static_cast<uint64_t>(index), {dst, len}, verify);
            }
            Check(st);
            return out;
          },
          py::arg("index"), py::arg("verify") = true,
          "The bytes of sample `index` as a new writable numpy uint8 array, read straight into "
          "it (torch.from_numpy takes it without a copy or a warning).");
}

}  // namespace dlfs
