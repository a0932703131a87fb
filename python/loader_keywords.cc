#include "loader_keywords.h"

#include <utility>

#include "dlfs/memory.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

std::shared_ptr<Volume> OpenVolume(py::handle v) {
  if (py::isinstance<Volume>(v)) return v.cast<std::shared_ptr<Volume>>();
  return Unwrap(Volume::Open(py::str(v).cast<std::string>()));
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
  LoaderOptions& o = out.options;
  o.sampler.batch_size = k.batch_size;
  o.sampler.shuffle = k.shuffle;
  o.sampler.seed = k.seed;
  o.sampler.rank = k.rank;
  o.sampler.world_size = k.world_size;
  o.sampler.drop_last = k.drop_last;
  if (py::isinstance<py::list>(k.volume) || py::isinstance<py::tuple>(k.volume)) {
    for (py::handle v : k.volume) out.volumes.push_back(OpenVolume(v));
    MixtureOptions m;
    m.weights = k.weights ? *k.weights : std::vector<double>(out.volumes.size(), 1.0);
    m.epoch_samples = k.epoch_samples;
    m.cycle = k.cycle;
    m.sampler = o.sampler;
    out.mixture = std::move(m);
  } else {
    if (k.weights || k.epoch_samples != 0 || k.cycle) {
      throw py::value_error("weights, epoch_samples and cycle apply to a list of volumes");
    }
    out.volumes.push_back(OpenVolume(k.volume));
  }
  o.prefetch_batches = k.prefetch_batches;
  o.engine.queue_depth = k.queue_depth;
  o.io_threads = k.io_threads;
  o.engine.kind = Unwrap(ParseEngineKind(k.engine));
  o.engine.direct_io = k.direct_io;
  o.verify_checksums = k.verify_checksums;
  o.plan.coalesce = k.coalesce;
  if (k.indices) o.subset = std::move(*k.indices);
  if (auto budget = CacheBudget(k.cache_budget)) o.cache_budget = *budget;
  if (k.fields) o.fields = std::move(*k.fields);
  o.cache_shared = k.cache_shared;
  o.skip_bad_samples = k.skip_bad_samples;
  o.max_bad_samples = k.max_bad_samples;
  if (!k.quarantine.is_none()) o.quarantine = QuarantineIndices(k.quarantine);
  return out;
}

}  // namespace dlfs::python
