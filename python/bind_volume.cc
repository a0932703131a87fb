// Python binding of dlfs.Volume (dlfs/volume.h): opening and closing a
// volume, reading its samples (one, a slice, a batch through this process's
// SampleReader), and its directory (paths, labels, classes, fields).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <unistd.h>

#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "bindings.h"
#include "distributed.h"
#include "dlfs/sample_reader.h"
#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

using VolumeClass = py::class_<Volume, std::shared_ptr<Volume>>;

constexpr const char* kVolumeDoc = R"doc(
An open dlfs volume (read-only).

Volume(path) reads the superblock and the whole sample directory, verifying
their checksums; a damaged or foreign file raises CorruptVolumeError, a
missing one FileNotFoundError. A volume of several targets is opened from
its target 0, which names the others; target_map={1: "/dev/nvme1n1"} looks
for target 1 there instead.

directory="node" keeps one copy of the directory per node, shared by every
process that opens the volume so (ranks, DataLoader workers, other jobs):
a region in /dev/shm that the first makes and the others attach and check
(node_name tells fake nodes apart); "private" (the default) keeps this
process's own. comm= (an MPI communicator) opens it collectively: one rank
reads the metadata for the job, each node keeps one copy; with
shard_local=True each node opens only its own targets.

    vol = dlfs.Volume("fashion-mnist.dlfs")
    data, label = vol[42]          # bytes, int (None when unlabelled)
    vol.path(42), vol.lookup("train/00042"), vol.classes
)doc";

py::object LabelOrNone(uint32_t label) {
  return label == kNoLabel ? py::object(py::none()) : py::object(py::int_(label));
}

// The images section as `dlfs info --json` gives it (src/report's
// ImagesJson): None without one.
py::object ImagesDict(const std::optional<ImagesUsage>& images) {
  if (!images) return py::none();
  const ImagePrepOptions& o = images->recorded.options;
  const auto when = [](bool yes, py::object value) { return yes ? value : py::none(); };
  py::dict d;
  d["max_side"] = o.max_side;
  d["filter"] = when(o.max_side != 0, py::str(std::string(NameOf(kResizeFilterNames, o.filter))));
  d["mode"] = std::string(NameOf(kImageStoreModeNames, o.mode));
  d["jpeg_quality"] = o.jpeg_quality;
  d["always_reencode"] = o.always_reencode;
  d["color"] = std::string(NameOf(kColorModeNames, o.color));
  d["smart_threshold"] = when(o.mode == ImageStoreMode::kSmart, py::int_(o.smart_threshold));
  d["jpeg_probability"] =
      when(o.mode == ImageStoreMode::kProportion, py::float_(o.jpeg_probability));
  d["seed"] = when(o.mode == ImageStoreMode::kProportion, py::int_(o.seed));
  d["images"] = images->recorded.images;
  d["changed"] = images->recorded.changed;
  d["resized"] = images->resized;
  py::dict stored;
  stored["jpeg"] = images->as_jpeg;
  stored["png"] = images->as_png;
  stored["raw"] = images->as_raw;
  d["stored"] = stored;
  d["largest_original_side"] = images->largest_original_side;
  return d;
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
  // "v2" when the volume uses the features docs/format.md calls format v2;
  // "v3" for the compact directory.
  d["format"] = s.layout == "compact" ? "v3" : s.incompat_flags.empty() ? "v1" : "v2";
  d["layout"] = s.layout;
  d["names"] = s.names;
  d["directory_bytes_per_sample"] = s.directory_bytes_per_sample();
  d["sample_metadata_bytes"] = s.sample_metadata_bytes;
  d["sample_metadata_bytes_per_sample"] = s.sample_metadata_bytes_per_sample();
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
  d["compat_flags"] = s.compat_flags;
  d["images"] = ImagesDict(s.images);
  d["fields"] = fields;
  d["dictionary_bytes"] = s.dictionary_bytes;
  d["token_width"] = s.token_width;
  d["token_count"] = s.token_count;
  return d;
}

// Index `index` of `v` (negative: from the end); IndexError naming the
// volume and its size.
// The directory `dir` names; KeyError when nothing has that path, ValueError
// when it is a sample.
uint64_t DirIndex(const Volume& v, const std::string& dir) {
  Result<PathEntry> found = v.directory().Resolve(dir);
  if (!found.ok()) Check(found.status().WithContext(v.path()));
  if (!found->is_dir) {
    Check(Status::InvalidArgument(v.path() + ": '" + dir + "' is a sample, not a directory"));
  }
  return found->index;
}

uint64_t CheckIndex(const Volume& v, int64_t index) {
  const int64_t given = index;
  if (index < 0) index += static_cast<int64_t>(v.size());
  if (index < 0 || static_cast<uint64_t>(index) >= v.size()) {
    throw py::index_error(v.path() + ": sample index " + std::to_string(given) +
                          " out of range (the volume has " + std::to_string(v.size()) +
                          " samples)");
  }
  return static_cast<uint64_t>(index);
}
uint64_t ReadIndex(const Volume& v, int64_t index) { return CheckIndex(v, index); }

// Sample `index` into `dst` (its SampleSize), without the GIL.
void ReadSampleInto(const Volume& v, uint64_t index, std::span<std::byte> dst, bool verify) {
  Status st;
  {
    py::gil_scoped_release release;
    st = v.ReadInto(index, dst, verify);
  }
  Check(st);
}

py::bytes ReadSample(const Volume& v, int64_t i, bool verify) {
  const uint64_t index = ReadIndex(v, i);
  const uint64_t len = Unwrap(v.SampleSize(index));
  py::bytes out(nullptr, static_cast<py::ssize_t>(len));  // filled in place
  ReadSampleInto(v, index, {reinterpret_cast<std::byte*>(PyBytes_AS_STRING(out.ptr())), len},
                 verify);
  return out;
}

// A new writable numpy uint8 array (torch.from_numpy takes it as it is).
py::array_t<uint8_t> ReadArray(const Volume& v, int64_t i, bool verify) {
  const uint64_t index = ReadIndex(v, i);
  const uint64_t len = Unwrap(v.SampleSize(index));
  py::array_t<uint8_t> out(static_cast<py::ssize_t>(len));
  ReadSampleInto(v, index, {reinterpret_cast<std::byte*>(out.mutable_data()), len}, verify);
  return out;
}

// The samples of `s` over `v`: a list of (bytes, label) as vol[i] gives.
py::list ReadSlice(const Volume& v, const py::slice& s) {
  size_t start = 0, stop = 0, step = 0, n = 0;
  if (!s.compute(v.size(), &start, &stop, &step, &n)) throw py::error_already_set();
  py::list out;
  for (size_t k = 0, i = start; k < n; ++k, i += step) {
    const uint64_t len = Unwrap(v.SampleSize(i));
    py::bytes data(nullptr, static_cast<py::ssize_t>(len));  // filled in place
    ReadSampleInto(v, i, {reinterpret_cast<std::byte*>(PyBytes_AS_STRING(data.ptr())), len}, true);
    out.append(py::make_tuple(data, LabelOrNone(v.directory().label(i))));
  }
  return out;
}

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

// Opening and closing, the whole volume's summary and check.
void DefVolumeFile(VolumeClass& c) {
  c.def(py::init([](const py::object& path,
                    std::optional<std::map<uint32_t, std::string>> target_map,
                    const std::string& directory, const std::string& node_name,
                    const py::object& comm, bool shard_local) {
          // Any path-like object (str, bytes, pathlib.Path, ...), as open() takes.
          const std::string p =
              py::module_::import("os").attr("fsencode")(path).cast<std::string>();
          VolumeOpenOptions options;
          if (target_map) options.target_map = std::move(*target_map);
          options.directory_sharing =
              Unwrap(ParseEnum(kDirectorySharingNames, directory, "directory"));
          options.node_name = node_name;
          if (!comm.is_none()) return OpenCollectively(*MpiJobFrom(comm), p, options, shard_local);
          if (shard_local) throw py::value_error("shard_local=True opens a volume with comm=");
          Result<std::shared_ptr<Volume>> v = Status::Cancelled("not run");
          {
            py::gil_scoped_release release;
            v = Volume::Open(p, options);
          }
          std::shared_ptr<Volume> volume = Unwrap(std::move(v));
          if (!volume->directory_note().empty() &&
              PyErr_WarnEx(PyExc_RuntimeWarning,
                           ("dlfs: " + p + ": " + volume->directory_note()).c_str(), 1) != 0) {
            throw py::error_already_set();
          }
          return volume;
        }),
        py::arg("path"), py::arg("target_map") = py::none(),
        py::arg("directory") =
            std::string(NameOf(kDirectorySharingNames, VolumeOpenOptions{}.directory_sharing)),
        py::arg("node_name") = "", py::arg("comm") = py::none(), py::arg("shard_local") = false)
      .def_property_readonly("directory_region", &Volume::directory_region,
                             "The /dev/shm region holding the directory this process uses "
                             "(directory='node' or comm=), or '' for a copy of its own.")
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
      .def("__len__", &Volume::size, "Number of samples.")
      .def_property_readonly("filename", &Volume::path, "The volume file.")
      .def("info", &InfoDict,
           "Summary: samples, bytes, classes, format (v1, or v2 with its features), "
           "format_version, targets, incompat_flags, "
           "fields (name, samples, compressed, stored_bytes, bytes), ...")
      .def(
          "verify",
          [](const Volume& v) {
            VerifyReport report;
            Status st;
            {
              py::gil_scoped_release release;
              st = VerifyVolume(v, {}, &report);
            }
            Check(st);
            std::vector<std::string> bad;
            if (!report.directory.ok()) bad.push_back(report.directory.message());
            if (!report.tokens.ok()) bad.push_back(report.tokens.message());
            for (const BadSample& b : report.bad) bad.push_back(b.reason);
            return bad;
          },
          "Checks every sample's checksum (and a compact directory's names and tree); returns "
          "the list of problems (empty when intact).")
      .def(
          "check_directory",
          [](const Volume& v) {
            Status st;
            {
              py::gil_scoped_release release;
              st = v.directory().CheckAll();
            }
            Check(st);
          },
          "Checks the whole directory without reading samples: a compact (format v3) "
          "directory is otherwise checked block by block as it is used. CorruptVolumeError "
          "naming the first damaged block.")
      .def("__repr__", [](const Volume& v) {
        return "<dlfs.Volume '" + v.path() + "' with " + std::to_string(v.size()) + " samples>";
      });
}

// Reading samples. __getitem__'s overloads are tried in this order: an
// index, a slice, anything else (a TypeError saying what vol[...] takes).
void DefVolumeReads(VolumeClass& c) {
  c.def(
       "__getitem__",
       [](const Volume& v, int64_t i) {
         py::bytes data = ReadSample(v, i, true);
         return py::make_tuple(data, LabelOrNone(v.directory().label(CheckIndex(v, i))));
       },
       py::arg("index"),
       "(bytes, label) of sample `index`; the checksum is verified. label is None when the "
       "sample has none.")
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
      .def("read", &ReadSample, py::arg("index"), py::arg("verify") = true,
           "The bytes of sample `index` as packed (checksum verified unless verify=False; "
           "decompressed when stored compressed). A volume whose samples have several fields "
           "refuses, listing them: use read_field / read_fields.")
      .def("read_array", &ReadArray, py::arg("index"), py::arg("verify") = true,
           "The bytes of sample `index` as a new writable numpy uint8 array, read straight into "
           "it (torch.from_numpy takes it without a copy or a warning).")
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
          "_buffer_bytes",
          [](py::object self, std::vector<uint64_t> indices) {
            return Unwrap(ReaderOf(self).BufferBytes(indices));
          },
          py::arg("indices"), "Bytes read_many(indices) needs in shared memory (internal).")
      .def(
          "size", [](const Volume& v, int64_t i) { return Unwrap(v.SampleSize(CheckIndex(v, i))); },
          py::arg("index"), "Size in bytes of sample `index` as read (decompressed).")
      .def(
          "extent",
          [](const Volume& v, int64_t i) {
            const SampleInfo s = Unwrap(v.directory().Locate(CheckIndex(v, i)));
            return py::make_tuple(s.target, s.offset, s.length);
          },
          py::arg("index"),
          "(target, offset, length): where sample `index`'s stored bytes are in its target file "
          "(compressed ones as stored).");
}

// A token volume (docs/format.md §10.11): documents of token ids back to
// back in one stream.
uint32_t TokenWidth(const Volume& v) {
  const uint32_t w = v.directory().token_width();
  if (w == 0) {
    throw py::value_error(v.path() +
                          ": not a token volume (pack one from a Megatron dataset or token "
                          "files, or write one with dlfs.Writer(path, tokens=\"uint16\"))");
  }
  return w;
}

void DefVolumeTokens(VolumeClass& c) {
  c.def_property_readonly(
       "token_width", [](const Volume& v) { return v.directory().token_width(); },
       "Bytes per token id of a token volume (2: uint16, 4: uint32); 0 for any other volume.")
      .def_property_readonly(
          "token_count", [](const Volume& v) { return v.directory().token_count(); },
          "Tokens in a token volume's corpus (its documents back to back); 0 for any other "
          "volume.")
      .def(
          "document_start",
          [](const Volume& v, int64_t d) -> uint64_t {
            TokenWidth(v);
            const int64_t given = d;
            if (d < 0) d += static_cast<int64_t>(v.size());
            if (d < 0 || static_cast<uint64_t>(d) > v.size()) {
              throw py::index_error(v.path() + ": document " + std::to_string(given) +
                                    " out of range (the volume has " + std::to_string(v.size()) +
                                    " documents)");
            }
            Result<uint64_t> r = Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              r = v.directory().DocumentStart(static_cast<uint64_t>(d));
            }
            return Unwrap(std::move(r));
          },
          py::arg("document"),
          "The first token of `document` in the corpus; document_start(len(vol)) is "
          "token_count. Empty documents start where the next one does.")
      .def(
          "document_at",
          [](const Volume& v, int64_t t) -> uint64_t {
            TokenWidth(v);
            const uint64_t n = v.directory().token_count();
            const int64_t given = t;
            if (t < 0) t += static_cast<int64_t>(n);
            if (t < 0 || static_cast<uint64_t>(t) >= n) {
              throw py::index_error(v.path() + ": token " + std::to_string(given) +
                                    " out of range (the corpus has " + std::to_string(n) +
                                    " tokens)");
            }
            Result<uint64_t> r = Status::Cancelled("not run");
            {
              py::gil_scoped_release release;
              r = v.directory().DocumentAt(static_cast<uint64_t>(t));
            }
            return Unwrap(std::move(r));
          },
          py::arg("token"),
          "The document holding token `token` (the last non-empty document starting at or "
          "before it): a binary search, nothing per document in memory.")
      .def(
          "read_tokens",
          [](const Volume& v, int64_t first, int64_t count, bool verify) -> py::array {
            const uint32_t w = TokenWidth(v);
            const uint64_t n = v.directory().token_count();
            if (first < 0 || count < 0 || static_cast<uint64_t>(first) > n ||
                static_cast<uint64_t>(count) > n - static_cast<uint64_t>(first)) {
              throw py::index_error(v.path() + ": tokens [" + std::to_string(first) + ", +" +
                                    std::to_string(count) + ") out of range (the corpus has " +
                                    std::to_string(n) + " tokens)");
            }
            py::array out = w == 2 ? py::array(py::dtype::of<uint16_t>(), count)
                                   : py::array(py::dtype::of<uint32_t>(), count);
            const std::span<std::byte> dst(static_cast<std::byte*>(out.mutable_data()),
                                           static_cast<size_t>(count) * w);
            Status st;
            {
              py::gil_scoped_release release;
              st = v.ReadTokens(static_cast<uint64_t>(first), static_cast<uint64_t>(count), dst,
                                verify);
            }
            Check(st);
            return out;
          },
          py::arg("first"), py::arg("count"), py::arg("verify") = true,
          "Tokens [first, first + count) of the corpus, across documents, as a new numpy array "
          "of the volume's dtype (uint16 or uint32). Reads the chunks of the token stream "
          "covering them and checks their CRC32C (unless verify=False): a mismatch raises "
          "CorruptVolumeError naming the file and the chunk.");
}

// The sample directory: paths, labels, classes, fields.
void DefVolumeDirectory(VolumeClass& c) {
  c.def(
       "path", [](const Volume& v, int64_t i) { return v.directory().Path(CheckIndex(v, i)); },
       py::arg("index"), "Path of sample `index` inside the volume, e.g. 'train/00042'.")
      .def(
          "lookup",
          [](const Volume& v, const std::string& path) {
            Result<uint64_t> index = v.directory().Lookup(path);
            if (!index.ok()) Check(index.status().WithContext(v.path()));
            return *index;
          },
          py::arg("path"), "Index of the sample at `path`; KeyError if there is none.")
      .def(
          "indices",
          [](const Volume& v, const std::string& dir) {
            const std::vector<uint64_t> idx = v.directory().SamplesUnder(DirIndex(v, dir));
            return py::array_t<int64_t>(static_cast<py::ssize_t>(idx.size()),
                                        reinterpret_cast<const int64_t*>(idx.data()));
          },
          py::arg("dir") = "",
          "Indices of every sample under directory `dir` (recursively), ascending.")
      .def(
          "samples_under",
          [](const Volume& v, const std::string& dir) -> py::object {
            const SampleSubset s = SubsetUnder(v.directory(), DirIndex(v, dir));
            if (s.kind() == SampleSubset::Kind::kRange) {
              return py::module_::import("builtins")
                  .attr("range")(s.first(), s.first() + s.Count(0));
            }
            const std::span<const uint64_t> idx = s.list();
            return py::array_t<int64_t>(static_cast<py::ssize_t>(idx.size()),
                                        reinterpret_cast<const int64_t*>(idx.data()));
          },
          py::arg("dir") = "",
          "The samples under directory `dir` (recursively), for a loader's indices=: a "
          "range(first, end) when they are contiguous (a directory's subtree usually is: "
          "nothing per sample), else an int64 array as indices(dir) gives.")
      .def(
          "label",
          [](const Volume& v, int64_t i) {
            return LabelOrNone(v.directory().label(CheckIndex(v, i)));
          },
          py::arg("index"), "Label (class id) of sample `index`, or None.")
      .def(
          "labels_at",
          [](const Volume& v, py::array_t<int64_t, py::array::c_style | py::array::forcecast> idx) {
            py::array_t<int64_t> out(idx.size());
            auto w = out.mutable_unchecked<1>();
            const int64_t* in = idx.data();
            for (py::ssize_t k = 0; k < idx.size(); ++k) {
              const uint32_t l = v.directory().label(CheckIndex(v, in[k]));
              w(k) = l == kNoLabel ? -1 : static_cast<int64_t>(l);
            }
            return out;
          },
          py::arg("indices"),
          "The labels of samples `indices` as an int64 numpy array (-1 where a sample has "
          "none): labels without a pass over the whole volume.")
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
          "fields",
          [](const Volume& v) {
            std::vector<std::string> names;
            const SampleDirectory& d = v.directory();
            if (!d.has_fields()) return names;
            for (uint32_t f = 0; f < d.field_count(); ++f) names.emplace_back(d.field_name(f));
            return names;
          },
          "The volume's field names, sorted ([] for a volume without fields).");
}

}  // namespace

SampleReader& ReaderOf(const py::object& volume_obj) {
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

void RegisterVolume(py::module_& m) {
  py::class_<PyReader>(m, "_SampleReader");
  VolumeClass volume(m, "Volume", py::dynamic_attr(), kVolumeDoc);
  DefVolumeFile(volume);
  DefVolumeReads(volume);
  DefVolumeDirectory(volume);
  DefVolumeTokens(volume);
}

}  // namespace dlfs::python
