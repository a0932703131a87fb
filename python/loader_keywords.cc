#include "loader_keywords.h"

#include <utility>

#include "dlfs/memory.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

// {t: path} or "1=PATH,2=PATH" (the CLI's --target-map).
std::map<uint32_t, std::string> TargetMap(const py::object& map) {
  if (map.is_none()) return {};
  if (py::isinstance<py::str>(map)) return Unwrap(ParseTargetMap(map.cast<std::string>()));
  if (py::isinstance<py::dict>(map)) {
    std::map<uint32_t, std::string> out;
    for (auto [t, path] : map.cast<py::dict>()) {
      out[t.cast<uint32_t>()] = py::str(path).cast<std::string>();
    }
    return out;
  }
  throw py::type_error("target_map: a dict {target: path} or '1=PATH,2=PATH', not " +
                       py::repr(map).cast<std::string>());
}

// quarantine=: sample indices, records with an "index" (quarantine()'s,
// or `dlfs verify --json`'s "bad_samples"), or that whole document.
std::vector<uint64_t> QuarantineIndices(const py::handle& value) {
  const auto bad = [&](const std::string& what) {
    return py::value_error(
        "quarantine: expected sample indices, records with an \"index\" (quarantine(), the "
        "\"bad_samples\" of dlfs verify --json) or the document dlfs verify --json writes; " +
        what);
  };
  py::handle list = value;
  if (py::isinstance<py::dict>(value)) {
    const py::dict doc = value.cast<py::dict>();
    if (!doc.contains("bad_samples")) throw bad("got a dict without \"bad_samples\"");
    list = doc["bad_samples"];
  }
  if (py::isinstance<py::str>(list) || py::isinstance<py::bytes>(list) ||
      !py::isinstance<py::iterable>(list)) {
    throw bad("got " + py::repr(value).cast<std::string>());
  }
  std::vector<uint64_t> out;
  for (py::handle item : list) {
    py::handle index = item;
    if (py::isinstance<py::dict>(item)) {
      const py::dict record = item.cast<py::dict>();
      if (!record.contains("index")) {
        throw bad("a record without \"index\": " + py::repr(item).cast<std::string>());
      }
      index = record["index"];
    }
    if (!py::isinstance<py::int_>(index) || py::isinstance<py::bool_>(index) ||
        index.cast<py::int_>() < py::int_(0)) {
      throw bad("got the item " + py::repr(item).cast<std::string>());
    }
    out.push_back(index.cast<uint64_t>());
  }
  return out;
}

// None keeps LoaderOptions' default; an int is bytes; a string is what
// --cache-budget takes ("2G", "auto", "0").
std::optional<uint64_t> CacheBudget(const py::object& budget) {
  if (budget.is_none()) return std::nullopt;
  if (py::isinstance<py::str>(budget)) return Unwrap(ParseByteBudget(budget.cast<std::string>()));
  if (py::isinstance<py::int_>(budget) && !py::isinstance<py::bool_>(budget) &&
      budget.cast<py::int_>() >= py::int_(0)) {
    return budget.cast<uint64_t>();
  }
  throw py::type_error(
      "cache_budget: bytes (an int >= 0), a size such as '2G' or 'auto', or None; got " +
      py::repr(budget).cast<std::string>());
}

}  // namespace

LoaderSetup ResolveLoaderKeywords(LoaderKeywords k) {
  LoaderSetup out;
  options::LoaderConfig& c = k.config;
  out.shard = {.shard_local = c.shard_local, .options = c.shard};
  if (!k.objects["comm"].is_none()) {
    out.job = MpiJobFrom(k.objects["comm"]);
  } else if (c.sharded()) {
    throw py::value_error(
        std::string(c.shard_local ? "shard_local" : "cluster_cache") +
        "=True moves samples between nodes, which needs MPI: launch with mpirun or `srun "
        "--mpi=pmix` (dlfs then finds the job itself) or pass comm=; torchrun starts no MPI");
  }
  c.open.target_map = TargetMap(k.objects["target_map"]);
  auto open_volume = [&](py::handle v) -> std::shared_ptr<Volume> {
    if (py::isinstance<Volume>(v)) return v.cast<std::shared_ptr<Volume>>();
    const std::string path = py::str(v).cast<std::string>();
    if (out.job) return OpenCollectively(*out.job, path, c.open, c.shard_local);
    Result<std::shared_ptr<Volume>> opened = Status::Unavailable("not opened");
    {
      py::gil_scoped_release release;  // may wait for the node's copy of the directory
      opened = Volume::Open(path, c.open);
    }
    std::shared_ptr<Volume> volume = Unwrap(std::move(opened));
    if (const std::string& note = volume->directory_note(); !note.empty()) {
      if (PyErr_WarnEx(PyExc_RuntimeWarning, ("dlfs: " + path + ": " + note).c_str(), 1) != 0) {
        throw py::error_already_set();
      }
    }
    return volume;
  };
  if (py::isinstance<py::list>(k.volume) || py::isinstance<py::tuple>(k.volume)) {
    for (py::handle v : k.volume) out.volumes.push_back(open_volume(v));
    MixtureOptions m;
    m.weights = c.weights ? *c.weights : std::vector<double>(out.volumes.size(), 1.0);
    m.epoch_samples = c.epoch_samples;
    m.cycle = c.cycle;
    m.sampler = c.loader.sampler;
    out.mixture = std::move(m);
  } else {
    if (c.mixture_options()) {
      throw py::value_error("weights, epoch_samples and cycle apply to a list of volumes");
    }
    out.volumes.push_back(open_volume(k.volume));
  }
  c.Finish();
  LoaderOptions& o = c.loader;
  o.subset = SubsetFromPython(k.objects["indices"]);
  if (auto budget = CacheBudget(k.objects["cache_budget"])) o.cache_budget = *budget;
  if (const py::object& q = k.objects["quarantine"]; !q.is_none())
    o.quarantine = QuarantineIndices(q);
  out.options = std::move(o);
  return out;
}

SampleSubset SubsetFromPython(const py::object& indices) {
  if (indices.is_none()) return {};
  static const py::object range_type = py::module_::import("builtins").attr("range");
  if (py::isinstance(indices, range_type) && indices.attr("step").cast<int64_t>() == 1) {
    const py::int_ start = indices.attr("start"), stop = indices.attr("stop");
    if (start < py::int_(0)) {
      throw py::value_error("indices: a range of sample indices starts at 0 or later, not " +
                            py::repr(indices).cast<std::string>());
    }
    const uint64_t first = start.cast<uint64_t>();
    const uint64_t end = stop < start ? first : stop.cast<uint64_t>();
    return SampleSubset::Range(first, end - first);
  }
  return SampleSubset(indices.cast<std::vector<uint64_t>>());
}

std::unique_ptr<BatchSource> MakeSource(LoaderSetup setup, SourceParts* parts) {
  const MixtureOptions* mixture = setup.mixture ? &*setup.mixture : nullptr;
  if (setup.job) {
    return MakeMpiSource(*setup.job, std::move(setup.volumes), mixture, setup.options, setup.shard,
                         parts);
  }
  if (!mixture) {
    Result<std::unique_ptr<Loader>> made = Status::Unavailable("not made");
    {
      py::gil_scoped_release release;  // allocating and pre-faulting buffers
      made = Loader::Create(setup.volumes.front(), setup.options);
    }
    auto loader = Unwrap(std::move(made));
    parts->loaders = {loader.get()};
    return loader;
  }
  Result<std::unique_ptr<MixtureSource>> mixed = Status::Unavailable("not made");
  {
    py::gil_scoped_release release;
    mixed = MixtureSource::Create(std::move(setup.volumes), *mixture, setup.options);
  }
  auto made = Unwrap(std::move(mixed));
  for (size_t v = 0; v < mixture->weights.size(); ++v) {
    parts->loaders.push_back(const_cast<Loader*>(&made->loader(v)));
  }
  parts->mixture = made.get();
  return made;
}

}  // namespace dlfs::python
