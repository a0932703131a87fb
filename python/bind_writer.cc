// Python bindings that write volumes: the engine of dlfs.Writer
// (python/dlfs/writer.py), pack() (dlfs/pack.h, like `dlfs pack`), and the
// module's __version__.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "bindings.h"
#include "dlfs/builder.h"
#include "dlfs/pack.h"
#include "dlfs/version.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

// The library names the option that would change an error by its field
// (PackOptions, VolumeBuilder::Options); say which keyword sets it here.
constexpr Rewording kKeywords[] = {
    {"(set overwrite to", "(pass force=True to"},
    {"(set skip_unreadable to", "(pass skip_unreadable=True to"},
    {"the fields option applies", "fields= applies"},
    {"the all_files option applies", "all_files=True applies"},
    {"the lmdb_payload_only option applies", "datum_payload=True applies"},
    {"all_files packs", "all_files=True packs"},
    {"the skip_hidden option applies", "skip_hidden=True applies"},
    {"skip_hidden left out", "skip_hidden=True left out"},
    {"skip_hidden leaves", "skip_hidden=True leaves"}};

// "a,b" or a list of names (fields=, class_names=); `spec_parser` parses
// the string form.
template <typename Parse>
std::vector<std::string> NameList(const py::object& value, Parse spec_parser) {
  if (py::isinstance<py::str>(value)) return spec_parser(value.cast<std::string>());
  return value.cast<std::vector<std::string>>();
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
    // The builder's 0 means "as many as target_paths name"; a Writer names none.
    if (targets == 0) throw py::value_error(path + ": a volume has 1 to 8 targets, not 0");
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
    Check(r.status().Reworded(kKeywords));
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

void RegisterPack(py::module_& m) {
  m.def(
      "pack",
      [](const std::string& source, const std::string& output, const std::string& source_kind,
         bool force, uint32_t align, bool skip_unreadable, const py::object& class_names,
         bool all_files, std::optional<py::function> on_progress, const py::object& fields,
         const std::string& compress, bool dict, std::optional<uint32_t> targets,
         std::vector<std::string> target_paths, bool datum_payload, bool skip_hidden) {
        PackOptions o;
        o.from = Unwrap(ParseSourceKind(source_kind));
        o.volume.overwrite = force;
        o.volume.align = align;
        o.skip_unreadable = skip_unreadable;
        o.class_names = NameList(
            class_names, [](const std::string& spec) { return Unwrap(ParseClassNames(spec)); });
        o.all_files = all_files;
        o.fields = NameList(fields, [](const std::string& spec) { return ParseFieldNames(spec); });
        o.volume.compress = Unwrap(ParseCompression(compress, dict));
        o.volume.targets = targets.value_or(0);  // 0: implied by target_paths
        o.volume.target_paths = std::move(target_paths);
        o.lmdb_payload_only = datum_payload;
        o.skip_hidden = skip_hidden;
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
        if (!r.ok()) Check(r.status().Reworded(kKeywords));
        const PackStats s = std::move(r).value();
        py::dict d;
        d["source_kind"] = std::string(SourceKindName(s.from));
        d["samples"] = s.samples;
        d["bytes"] = s.bytes;
        d["classes"] = s.classes;
        d["skipped"] = s.skipped;
        d["removed_temporaries"] = s.removed_temporaries;  // of killed earlier packs
        d["ignored"] = s.ignored();
        d["ignored_examples"] = s.ignored_examples;
        d["skipped_hidden"] = s.skipped_hidden;
        d["empty_classes"] = s.empty_classes;
        d["renamed_classes"] = s.renamed_classes;
        d["dictionary_bytes"] = s.dictionary_bytes;
        d["seconds"] = s.seconds;
        return d;
      },
      py::arg("source"), py::arg("output"), py::arg("source_kind") = "auto",
      py::arg("force") = false, py::arg("align") = PackOptions{}.volume.align,
      py::arg("skip_unreadable") = false, py::arg("class_names") = py::list(),
      py::arg("all_files") = false, py::arg("on_progress") = py::none(), py::kw_only(),
      py::arg("fields") = py::list(), py::arg("compress") = "none", py::arg("dict") = false,
      py::arg("targets") = py::none(), py::arg("target_paths") = std::vector<std::string>{},
      py::arg("datum_payload") = false, py::arg("skip_hidden") = false,
      R"doc(Packs a data set into a new volume (like `dlfs pack`) and returns stats.

source_kind: "auto", "imagefolder", "idx", "tar" or "lmdb". Raises
FileExistsError if output exists and force is False. all_files: imagefolder
packs every file, not only what torchvision's ImageFolder loads.
class_names: a list, or "a,b,c" / "@FILE" as --class-names takes it.
Keyword-only, as dlfs pack's flags: fields (tar: a list or "jpg,cls"),
compress ("none", "zstd", "zstd:LEVEL"), dict (train a zstd dictionary;
needs zstd), targets and target_paths (spread over several files; targets
None: one more than target_paths names),
datum_payload (lmdb: only each Caffe Datum's data), skip_hidden
(imagefolder: leave out hidden files and directories, which torchvision's
ImageFolder reads; the labels then differ from torchvision's where a
hidden directory is at the top). ValueError for a bad
option. on_progress(dict) is called about every 100 ms (samples, bytes,
total_samples, ...); dlfs.pack's progress=True uses it. Ctrl-C stops
packing and leaves no volume.)doc");
}

}  // namespace

void RegisterWriter(py::module_& m) {
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

  RegisterPack(m);
}

}  // namespace dlfs::python
