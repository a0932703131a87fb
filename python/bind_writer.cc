// Python bindings that write volumes: the engine of dlfs.Writer
// (python/dlfs/writer.py), pack() (dlfs/pack.h, like `dlfs pack`), and the
// module's __version__.
#include <pybind11/numpy.h>
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
#include "dlfs/image_prep.h"
#include "dlfs/pack.h"
#include "dlfs/version.h"
#include "dlfs_tools/pack_option_table.h"
#include "option_keywords.h"
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
    {"skip_hidden leaves", "skip_hidden=True leaves"},
    {"(set skip_unreadable to leave out", "(pass skip_unreadable=True to leave out"},
    {"needs the lmdb_payload_only option", "needs datum_payload=True"},
    {"a token volume (token_width)", "a token volume (tokens=)"},
    {"the token_dtype option applies", "token_dtype= applies"},
    {"the lengths option applies", "lengths= applies"},
    {"the eod option applies", "eod= applies"}};

// The image preparation keywords of dlfs.pack and dlfs.Writer (the flags of
// `dlfs pack`), as ImagePrepOptions; ValueError for a bad one.
ImagePrepOptions ImagePrep(std::optional<uint32_t> max_side, const std::string& resize_filter,
                           std::optional<uint32_t> jpeg_quality, bool always_reencode,
                           const std::string& image_format, uint64_t smart_threshold,
                           double jpeg_probability, uint64_t image_seed,
                           const std::string& image_color, uint32_t prepare_threads) {
  ImagePrepOptions o;
  if (max_side && *max_side == 0) throw py::value_error("max_side must be at least 1 (or None)");
  if (jpeg_quality && (*jpeg_quality == 0 || *jpeg_quality > 100)) {
    throw py::value_error("jpeg_quality is 1..100 (or None)");
  }
  o.max_side = max_side.value_or(0);
  o.filter = Unwrap(ParseEnum(kResizeFilterNames, resize_filter, "resize_filter"));
  o.jpeg_quality = jpeg_quality.value_or(0);
  o.always_reencode = always_reencode;
  o.mode = Unwrap(ParseEnum(kImageStoreModeNames, image_format, "image_format"));
  o.smart_threshold = smart_threshold;
  o.jpeg_probability = jpeg_probability;
  o.seed = image_seed;
  o.color = Unwrap(ParseEnum(kColorModeNames, image_color, "image_color"));
  o.threads = prepare_threads;
  Check(CheckImagePrepOptions(o));
  return o;
}

// The same from dlfs.Writer's keywords, passed on as a dict.
ImagePrepOptions ImagePrep(const py::dict& k) {
  const ImagePrepOptions d;
  const auto get = [&k](const char* key, auto fallback) {
    return k.contains(key) && !k[key].is_none() ? k[key].cast<decltype(fallback)>() : fallback;
  };
  const auto opt = [&k](const char* key) {
    return k.contains(key) && !k[key].is_none() ? std::optional<uint32_t>(k[key].cast<uint32_t>())
                                                : std::nullopt;
  };
  return ImagePrep(opt("max_side"), get("resize_filter", std::string("bilinear")),
                   opt("jpeg_quality"), get("always_reencode", false),
                   get("image_format", std::string("keep")),
                   get("smart_threshold", d.smart_threshold),
                   get("jpeg_probability", d.jpeg_probability), get("image_seed", d.seed),
                   get("image_color", std::string("rgb")), get("prepare_threads", d.threads));
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
           std::vector<std::string> class_names, const std::string& compress, bool dict,
           const py::dict& images, const std::string& layout, uint32_t token_width)
      : path_(path) {
    VolumeBuilder::Options o;
    o.layout = Unwrap(ParseEnum(kDirectoryLayoutNames, layout, "layout"));
    o.token_width = token_width;
    // The builder's 0 means "as many as target_paths name"; a Writer names none.
    if (targets == 0) throw py::value_error(path + ": a volume has 1 to 8 targets, not 0");
    o.targets = targets;
    o.align = alignment;
    o.overwrite = force;
    Result<VolumeBuilder::Options::Compression> compression = ParseCompression(compress, dict);
    Check(compression.status());
    o.compress = std::move(*compression);
    o.images = ImagePrep(images);
    o.images.skip_unreadable =
        images.contains("skip_unreadable") && images["skip_unreadable"].cast<bool>();
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
        if (!st.ok()) {
          b.AbortSample();
          st = st.WithContext(path_ + ": sample '" + sample_path + "'");
        } else {
          // With image preparation the error may be an earlier sample's:
          // it names that sample itself.
          st = b.EndSample();
          if (!st.ok()) st = st.WithContext(path_);
        }
      }
    }
    Check(st.Reworded(kKeywords));
  }

  // Adds len(lengths) samples whose bytes lie back to back in `data`, with
  // labels (-1 for none) and paths (none: unnamed samples). The arrays were
  // checked and converted by dlfs.Writer.write_batch.
  void AddBatch(const py::handle& data, py::array_t<uint64_t, py::array::c_style> lengths,
                py::object labels, py::object paths) {
    VolumeBuilder& b = Builder();
    ByteView bytes(data);
    std::vector<uint32_t> label_values;
    if (!labels.is_none()) {
      auto a = labels.cast<py::array_t<int64_t, py::array::c_style | py::array::forcecast>>();
      label_values.resize(static_cast<size_t>(a.size()));
      const int64_t* l = a.data();
      for (size_t k = 0; k < label_values.size(); ++k) {
        label_values[k] = l[k] < 0 ? kNoLabel : static_cast<uint32_t>(l[k]);
      }
    }
    std::vector<std::string> path_storage;
    std::vector<std::string_view> path_views;
    if (!paths.is_none()) {
      path_storage = paths.cast<std::vector<std::string>>();
      path_views.assign(path_storage.begin(), path_storage.end());
    }
    Status st;
    {
      py::gil_scoped_release release;
      st = b.AddBatch(bytes.bytes(), {lengths.data(), static_cast<size_t>(lengths.size())},
                      label_values, path_views);
    }
    Check(st.WithContext(path_).Reworded(kKeywords));
  }

  const char* layout() const {
    return builder_ ? NameOf(kDirectoryLayoutNames, builder_->layout()).data() : "";
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
    Check(st.Reworded(kKeywords));
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
  // What image preparation did so far: {"images", "changed", ...}.
  py::dict image_stats() const {
    py::dict d;
    if (!builder_) return d;
    const ImagePrepStats& s = builder_->image_stats();
    d["images"] = s.images;
    d["changed"] = s.changed;
    d["resized"] = s.resized;
    d["skipped"] = s.skipped;
    d["skipped_examples"] = s.skipped_examples;
    return d;
  }
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

// stats["..."] of dlfs.pack.
py::dict PackStatsDict(const PackStats& s) {
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
  d["token_width"] = s.token_width;
  d["tokens"] = s.tokens;
  py::dict images;
  images["images"] = s.images.images;
  images["changed"] = s.images.changed;
  images["resized"] = s.images.resized;
  images["as_jpeg"] = s.images.as_jpeg;
  images["as_png"] = s.images.as_png;
  images["as_raw"] = s.images.as_raw;
  images["bytes_in"] = s.images.bytes_in;
  images["bytes_out"] = s.images.bytes_out;
  images["skipped"] = s.images.skipped;
  d["images"] = images;
  d["seconds"] = s.seconds;
  return d;
}

// Runs Pack with `o`, the GIL released; on_progress(dict) about every
// 100 ms. Ctrl-C (and an exception in on_progress) stops packing, leaving
// nothing behind, and is raised here.
py::dict RunPack(const std::string& source, const std::string& output, PackOptions o,
                 const std::optional<py::function>& on_progress) {
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
  return PackStatsDict(*r);
}

// The keywords of kPackOptions that take Python objects: class_names and
// fields, each a list of names or the CLI's text ("a,b,c", "@FILE").
PackOptions ResolvePackKeywords(options::PackConfig config, const KeywordObjects& objects) {
  const auto names = [](const py::object& value, const char* keyword) {
    if (py::isinstance<py::str>(value) || !py::isinstance<py::sequence>(value)) {
      throw py::type_error(std::string("dlfs.pack(): ") + keyword +
                           " takes a list of names or \"a,b,c\", not " +
                           py::repr(value).cast<std::string>());
    }
    return value.cast<std::vector<std::string>>();
  };
  if (const py::object& v = objects["class_names"]; !v.is_none()) {
    config.pack.class_names = py::isinstance<py::str>(v)
                                  ? Unwrap(ParseClassNames(v.cast<std::string>()))
                                  : names(v, "class_names");
  }
  if (const py::object& v = objects["fields"]; !v.is_none()) {
    if (py::isinstance<py::str>(v)) {
      config.fields = v.cast<std::string>();
    } else {
      config.pack.fields = names(v, "fields");
    }
  }
  Check(CheckImagePrepOptions(config.pack.volume.images));
  return Unwrap(options::ResolvePack(std::move(config)));
}

// dlfs.pack(source, output, <the first kPackPositional keywords>, *,
// <the others>, on_progress=None): every keyword from kPackOptions, as
// `dlfs pack`'s flags are, with their defaults from PackConfig.
template <size_t... P, size_t... K>
void DefPack(py::module_& m, std::index_sequence<P...>, std::index_sequence<K...>) {
  using options::kPackOptions;
  using options::kPackPositional;
  static const std::string doc = SignatureLine<kPackOptions>("pack", "source, output") + R"doc(
Packs a data set into a new volume (like `dlfs pack`) and returns stats.
The keywords are dlfs pack's flags (see dlfs.pack's help, the Python
function that calls this one); the first six may be given by position.
on_progress(dict) is called about every 100 ms (samples, bytes,
total_samples, ...). Ctrl-C stops packing and leaves no volume.)doc";
  m.def(
      "pack",
      [](const std::string& source, const std::string& output,
         typename KeywordOption<kPackOptions, P>::Param... positional,
         typename KeywordOption<kPackOptions, kPackPositional + K>::Param... keywords,
         std::optional<py::function> on_progress) {
        options::PackConfig config;
        KeywordObjects objects;
        (KeywordOption<kPackOptions, P>::Apply(std::move(positional), config, objects), ...);
        (KeywordOption<kPackOptions, kPackPositional + K>::Apply(std::move(keywords), config,
                                                                 objects),
         ...);
        return RunPack(source, output, ResolvePackKeywords(std::move(config), objects),
                       on_progress);
      },
      py::arg("source"), py::arg("output"), ArgOf<kPackOptions, P>()..., py::kw_only(),
      ArgOf<kPackOptions, kPackPositional + K>()..., py::arg("on_progress") = py::none(),
      doc.c_str());
}

void RegisterPack(py::module_& m) {
  constexpr size_t kAll = std::tuple_size_v<std::decay_t<decltype(options::kPackOptions)>>;
  DefPack(m, std::make_index_sequence<options::kPackPositional>{},
          std::make_index_sequence<kAll - options::kPackPositional>{});
}

void RegisterPrepareImage(py::module_& m) {
  m.def(
      "prepare_image",
      [](const py::handle& data, const std::string& path, const std::string& field,
         std::optional<uint32_t> max_side, const std::string& resize_filter,
         std::optional<uint32_t> jpeg_quality, bool always_reencode,
         const std::string& image_format, uint64_t smart_threshold, double jpeg_probability,
         uint64_t image_seed, const std::string& image_color) {
        const ImagePrepOptions o =
            ImagePrep(max_side, resize_filter, jpeg_quality, always_reencode, image_format,
                      smart_threshold, jpeg_probability, image_seed, image_color, 0);
        ByteView view(data);
        Result<PreparedImage> r = Status::Cancelled("not run");
        {
          py::gil_scoped_release release;
          thread_local ImageWorkspace ws;
          r = PrepareImage(ws, view.bytes(), o, path, field);
        }
        const PreparedImage p = Unwrap(std::move(r));
        const std::span<const std::byte> out =
            p.changed ? std::span<const std::byte>(p.bytes) : view.bytes();
        py::dict d;
        d["data"] = py::bytes(reinterpret_cast<const char*>(out.data()), out.size());
        d["changed"] = p.changed;
        d["stored"] = p.changed
                          ? py::object(py::str(std::string(NameOf(kStoredImageNames, p.stored))))
                          : py::object(py::none());
        d["resized"] = p.resized;
        d["width"] = p.width;
        d["height"] = p.height;
        d["original"] =
            py::dict(py::arg("format") = std::string(NameOf(kImageFormatNames, p.original.format)),
                     py::arg("width") = p.original.width, py::arg("height") = p.original.height,
                     py::arg("channels") = p.original.channels);
        return d;
      },
      py::arg("data"), py::arg("path") = "", py::arg("field") = "", py::kw_only(),
      py::arg("max_side") = py::none(), py::arg("resize_filter") = "bilinear",
      py::arg("jpeg_quality") = py::none(), py::arg("always_reencode") = false,
      py::arg("image_format") = "keep",
      py::arg("smart_threshold") = ImagePrepOptions{}.smart_threshold,
      py::arg("jpeg_probability") = ImagePrepOptions{}.jpeg_probability,
      py::arg("image_seed") = ImagePrepOptions{}.seed, py::arg("image_color") = "rgb",
      R"doc(Prepares one image (JPEG or PNG bytes) as dlfs.Writer's and dlfs.pack's
image keywords say, and returns a dict: data (the bytes a volume would store:
new ones, or the original's when nothing changed), changed, stored ("jpeg",
"png", "raw" or None), resized, width and height (stored), original (format,
width, height, channels). path and field name the sample for
image_format="proportion". ValueError for bad options or an image that cannot
be prepared.)doc");
}

}  // namespace

void RegisterWriter(py::module_& m) {
  m.attr("__version__") = DLFS_VERSION_STRING;

  py::class_<PyWriter>(m, "_VolumeWriter",
                       "The engine of dlfs.Writer (see help(dlfs.Writer)); use that instead.")
      .def(py::init<const std::string&, uint32_t, uint32_t, bool, std::vector<std::string>,
                    const std::string&, bool, const py::dict&, const std::string&, uint32_t>(),
           py::arg("path"), py::arg("targets"), py::arg("alignment"), py::arg("force"),
           py::arg("class_names"), py::arg("compress") = "", py::arg("dict") = false,
           py::arg("images") = py::dict(), py::arg("layout") = "auto", py::arg("token_width") = 0)
      .def("add", &PyWriter::Add, py::arg("path"), py::arg("data"), py::arg("label"))
      .def("add_batch", &PyWriter::AddBatch, py::arg("data"), py::arg("lengths"), py::arg("labels"),
           py::arg("paths"))
      .def_property_readonly("layout", &PyWriter::layout)
      .def("close", &PyWriter::Close)
      .def("abort", &PyWriter::Abort)
      .def_property_readonly("closed", &PyWriter::closed)
      .def_property_readonly("samples", &PyWriter::samples)
      .def_property_readonly("bytes", &PyWriter::bytes)
      .def_property_readonly("image_stats", &PyWriter::image_stats)
      .def_property_readonly("temp_paths", &PyWriter::temp_paths)
      .def_property_readonly("path", &PyWriter::path);

  RegisterPack(m);
  RegisterPrepareImage(m);
}

}  // namespace dlfs::python
