// Python binding of ImageLoader: the C++ Loader (or a MixtureSource of
// several volumes) wrapped in a DecodeStage (dlfs/decode_stage.h), batches of
// decoded images; dlfs.torch.ImageLoader wraps it.
//
// Zero copy: a batch reaches Python as a writable numpy array over the
// batch's tensor (numpy-with-base: the array's base is a capsule owning a
// copy of the C++ Batch, so the buffer lives while any view of it does);
// torch.from_numpy() then shares the memory with the tensor. The GIL is
// released while decoding and while waiting for batches.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "dlfs/decode.h"
#include "dlfs/decode_stage.h"
#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "dlfs/volume.h"
#include "epoch_stats.h"
#include "loader_keywords.h"
#include "state_dict.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

constexpr const char* kImageLoaderDoc = R"doc(
The C++ loader plus the decode stage: batches of decoded images.
Use dlfs.torch.ImageLoader (it adds ranks from torch.distributed and torch
tensors); this is the raw binding: iterating yields
(images numpy array, labels int64 array, indices int64 array, sources int64
array), where images is a writable view of the batch's buffer (no copy) and
sources says each image's volume (its position in a list of volumes, else 0).
)doc";

py::dict StatsDict(const DecodeStats& s) {
  py::dict d;
  d["images"] = s.images;
  d["skipped"] = s.skipped;
  d["skipped_examples"] = s.skipped_examples;
  return d;
}

// A writable numpy view of a decoded batch's tensor; its base owns a copy
// of the Batch, which keeps the pooled buffer out of the pool.
py::array TensorArray(const Batch& batch) {
  const TensorView& t = batch.tensor();
  auto* holder = new Batch(batch);
  py::capsule base(holder, [](void* p) { delete static_cast<Batch*>(p); });
  const py::dtype dt =
      t.dtype == DType::kFloat32 ? py::dtype::of<float>() : py::dtype::of<uint8_t>();
  std::vector<py::ssize_t> dims(t.shape.begin(), t.shape.end());
  return py::array(dt, dims, t.data, base);
}

// The C++ Loader (a MixtureSource of several volumes, or with comm= what
// the job reads through) wrapped in a DecodeStage, iterated from Python.
class PyImageLoader {
 public:
  // The source MakeSource made of `setup` (holding the GIL), under the stage.
  PyImageLoader(LoaderSetup setup, const DecodeStageOptions& dso)
      : job_(setup.job), volumes_(setup.volumes) {
    std::unique_ptr<BatchSource> source = MakeSource(std::move(setup), &parts_);
    std::vector<std::shared_ptr<const Volume>> named(volumes_.begin(), volumes_.end());
    Result<std::unique_ptr<DecodeStage>> stage = Status::Unavailable("not made");
    {
      py::gil_scoped_release release;  // starting the decode threads
      stage = DecodeStage::Create(std::move(source), std::move(named), dso);
    }
    stage_ = Unwrap(std::move(stage));
  }

  // After load_state_dict, setting the restored epoch keeps the restored
  // position (state_dict.h).
  void set_epoch(uint64_t e, bool discard_restored) { position_.set_epoch(e, discard_restored); }
  uint64_t epoch() const { return position_.epoch(); }
  void Start() {
    epochs_.Start(position_.epoch(), CountersOf(parts_));
    position_.Start(stage(), mu_);
  }
  py::dict State() { return StateDict(Unwrap(position_.Save(stage(), mu_))); }
  void LoadState(const py::handle& state) {
    Check(position_.Load(stage(), mu_, Unwrap(StateFromDict(state))));
  }
  // As dlfs.Loader.close().
  void Close() {
    std::unique_ptr<DecodeStage> gone;
    {
      std::lock_guard lock(mu_);
      gone = std::move(stage_);
      parts_ = SourceParts{};
    }
    py::gil_scoped_release release;
    gone.reset();
  }
  bool closed() const { return stage_ == nullptr; }
  py::list EpochStats() const { return epochs_.Records(CountersOf(parts_)); }
  const SourceParts& parts() const { return parts_; }

  py::tuple Next() {
    DecodeStage& s = stage();
    Batch batch;
    Result<bool> more = false;
    {
      py::gil_scoped_release release;  // decoding and I/O run meanwhile
      std::lock_guard lock(mu_);
      more = s.Next(&batch);
    }
    Check(more.status());
    if (!*more) {
      epochs_.Finish(CountersOf(parts_));
      throw py::stop_iteration();
    }
    epochs_.Count(batch);
    py::array images;
    if (batch.tensor()) {
      images = TensorArray(batch);
    } else {  // every sample of the batch was skipped
      const DecodeStageOptions& o = options();
      const int64_t s = o.image.transform.size, c = std::max<uint32_t>(stage_->channels(), 1);
      std::vector<py::ssize_t> dims = o.image.output.layout == OutputLayout::kNCHW
                                          ? std::vector<py::ssize_t>{0, c, s, s}
                                          : std::vector<py::ssize_t>{0, s, s, c};
      images = o.image.output.dtype == DType::kFloat32 ? py::array(py::dtype::of<float>(), dims)
                                                       : py::array(py::dtype::of<uint8_t>(), dims);
    }
    py::array_t<int64_t> labels(static_cast<py::ssize_t>(batch.size()));
    py::array_t<int64_t> indices(static_cast<py::ssize_t>(batch.size()));
    py::array_t<int64_t> sources(static_cast<py::ssize_t>(batch.size()));
    auto wl = labels.mutable_unchecked<1>();
    auto wi = indices.mutable_unchecked<1>();
    auto ws = sources.mutable_unchecked<1>();
    const auto src = batch.sources();
    for (size_t i = 0; i < batch.size(); ++i) {
      wl(i) = batch.label(i) == kNoLabel ? -1 : static_cast<int64_t>(batch.label(i));
      wi(i) = static_cast<int64_t>(batch.index(i));
      ws(i) = src.empty() ? 0 : src[i];
    }
    return py::make_tuple(images, labels, indices, sources);
  }

  DecodeStage& stage() {
    if (!stage_) throw py::value_error("the loader is closed");
    return *stage_;
  }
  // Each volume's Loader (none for a ShardLoader), and the volumes.
  const std::vector<Loader*>& loaders() const { return parts_.loaders; }
  const std::vector<std::shared_ptr<Volume>>& volumes() const { return volumes_; }
  const MixtureSource* mixture() const { return parts_.mixture; }
  const DecodeStageOptions& options() const { return options_; }
  void set_options(const DecodeStageOptions& o) { options_ = o; }

 private:
  std::shared_ptr<const MpiJob> job_;  // outlives stage_, whose source uses its communicator
  std::unique_ptr<DecodeStage> stage_;
  SourceParts parts_;  // the pieces of stage_'s source
  std::vector<std::shared_ptr<Volume>> volumes_;
  DecodeStageOptions options_;
  SourcePosition position_;
  EpochLog epochs_;
  std::mutex mu_;  // the stage has one caller at a time
};

// dlfs.ImageLoader(...): the loader keywords through ResolveLoaderKeywords,
// the decode stage's from the pipeline and its own keywords.
std::unique_ptr<PyImageLoader> MakeImageLoader(LoaderKeywords k, const ImagePipeline& pipeline,
                                               uint32_t decode_threads, uint32_t decode_prefetch,
                                               std::optional<std::string> field) {
  // One field: the decode stage decodes one image per sample. Samples that
  // cannot be read or fail their checksum are left out (skip_bad_samples)
  // like undecodable ones.
  if (field) k.config.loader.fields = std::vector{*field};
  const bool skip_bad_samples = k.config.loader.skip_bad_samples;
  DecodeStageOptions dso;
  dso.image = pipeline.options();
  dso.decode_threads = decode_threads;
  dso.prefetch_batches = decode_prefetch;
  dso.skip_bad_samples = skip_bad_samples;
  try {
    auto l = std::make_unique<PyImageLoader>(ResolveLoaderKeywords(std::move(k)), dso);
    l->set_options(dso);
    return l;
  } catch (const StatusError& e) {
    // The decode stage takes one field, named by field= (not fields=).
    static constexpr Rewording kOneField[] = {
        {"(the fields option)", "(the fields option, one name)"}};
    throw StatusError{e.status.Reworded(kOneField)};
  }
}

}  // namespace

void RegisterImageLoader(py::module_& m) {
  static const DecodeStageOptions kStage;
  py::class_<PyImageLoader> loader(m, "ImageLoader", kImageLoaderDoc);
  // The decode stage's keywords follow the loader's, keyword-only.
  DefLoaderInit<options::kLoaderOptions, const ImagePipeline&, uint32_t, uint32_t,
                std::optional<std::string>>(
      loader, &MakeImageLoader, py::kw_only(), py::arg("pipeline"),
      py::arg("decode_threads") = kStage.decode_threads,
      py::arg("decode_prefetch") = kStage.prefetch_batches, py::arg("field") = py::none());
  loader
      .def(
          "quarantine",
          [](PyImageLoader& l) {
            l.stage();  // raises when closed
            py::list out;
            for (const Loader* one : l.loaders()) {
              out += QuarantineRecords(one->volume().path(), one->quarantine());
            }
            if (l.parts().shard_quarantine) {
              out += QuarantineRecords(l.volumes().front()->path(), l.parts().shard_quarantine());
            }
            // Undecodable ones (the stage names each sample's volume).
            return out +
                   QuarantineRecords(l.volumes().front()->path(), l.stage().skipped_samples());
          },
          "Samples left out as bad (unreadable, failed checksum, undecodable): "
          "[{volume, index, path, reason}].")
      .def("set_epoch", &PyImageLoader::set_epoch, py::arg("epoch"),
           py::arg("discard_restored") = false,
           "As dlfs.Loader.set_epoch: a position restored in the middle of epoch E is kept "
           "by set_epoch(E); another epoch raises ValueError unless discard_restored=True.")
      .def_property_readonly("epoch", &PyImageLoader::epoch)
      .def("__len__", [](PyImageLoader& l) { return l.stage().batches_per_epoch(); })
      .def("__iter__",
           [](PyImageLoader& l) -> PyImageLoader& {
             l.Start();
             return l;
           })
      .def("__next__", &PyImageLoader::Next)
      .def("state_dict", &PyImageLoader::State,
           "Where the iteration is, as dlfs.Loader.state_dict(): batches decoded ahead "
           "but not handed out do not count.")
      .def("load_state_dict", &PyImageLoader::LoadState, py::arg("state"),
           "Continues from a state_dict() (also one saved with another world size or "
           "batch size: the rest of the epoch is split among the new ranks).")
      .def_property_readonly("channels", [](PyImageLoader& l) { return l.stage().channels(); })
      .def_property_readonly("decode_threads",
                             [](PyImageLoader& l) { return l.stage().decode_threads(); })
      .def_property_readonly("description",
                             [](PyImageLoader& l) { return l.stage().description(); })
      .def_property_readonly(
          "stats", [](PyImageLoader& l) { return StatsDict(l.stage().stats()); },
          "{'images', 'skipped', 'skipped_examples'} over the loader's life.")
      .def_property_readonly(
          "indices",
          [](PyImageLoader& l) -> py::array_t<int64_t> {
            l.stage();
            if (l.parts().shard_rank_indices) {
              const std::vector<uint64_t> idx = l.parts().shard_rank_indices(l.epoch());
              return py::array_t<int64_t>(static_cast<py::ssize_t>(idx.size()),
                                          reinterpret_cast<const int64_t*>(idx.data()));
            }
            return RankIndicesArray(l.mixture(), *l.loaders().front(), l.epoch());
          },
          "This rank's sample indices for the current epoch, in reading order.")
      .def("epoch_stats", &PyImageLoader::EpochStats,
           "Per epoch, as dlfs.Loader.epoch_stats(): samples and where their bytes came from.")
      .def("close", &PyImageLoader::Close,
           "Stops the loader's threads and frees its buffers (and its MPI communicators) now.")
      .def_property_readonly("closed", &PyImageLoader::closed);
}

}  // namespace dlfs::python
