// What the Python bindings of Loader and ImageLoader share about their
// BatchSource: its SourceState as the dict state_dict() returns and
// load_state_dict() takes (the keys of its text form, dlfs/batch_source.h;
// flags as bools; the epoch's earlier parts of an elastic resume as the
// "segments" string; the samples left out as bad as the "quarantine" string
// "3,17"; the epoch order's version as "order"), the iteration's position,
// quarantine records, and the rank's sample indices of an epoch. (Their
// keywords become LoaderOptions in loader_keywords.h.)
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "dlfs/batch_source.h"
#include "dlfs/loader.h"
#include "dlfs/mixture.h"
#include "dlfs/sampler.h"

namespace dlfs {

inline pybind11::dict StateDict(const SourceState& s) {
  pybind11::dict d;
  d["epoch"] = s.epoch;
  d["batches"] = s.batches;
  d["segments"] = FormatEpochSegments(s.done);
  std::string q;
  for (uint64_t i : s.quarantined) q += (q.empty() ? "" : ",") + std::to_string(i);
  d["quarantine"] = q;
  d["volume_uuid"] = s.volume_uuid;
  d["volume_samples"] = s.volume_samples;
  d["samples"] = s.samples;
  d["subset_crc"] = s.subset_crc;
  d["seed"] = s.sampler.seed;
  d["shuffle"] = s.sampler.shuffle;
  d["batch_size"] = s.sampler.batch_size;
  d["drop_last"] = s.sampler.drop_last;
  d["rank"] = s.sampler.rank;
  d["world_size"] = s.sampler.world_size;
  d["order"] = s.order;
  return d;
}

// The dict back, through the text form's parser (which names a missing,
// unknown or malformed key). Version 1 of the text form, whose "segments"
// is optional: a dict saved before elastic resume existed still loads; and
// "order" too: a dict saved before the order had versions is order 1.
// TypeError/ValueError for what is not such a dict.
inline Result<SourceState> StateFromDict(const pybind11::handle& state) {
  namespace py = pybind11;
  if (!py::isinstance<py::dict>(state)) {
    throw py::type_error("load_state_dict() takes the dict state_dict() returned");
  }
  std::string text = "dlfs-source-state 1\n";
  for (auto [key, value] : state.cast<py::dict>()) {
    const std::string k = py::str(key);
    std::string v;
    if (py::isinstance<py::bool_>(value)) {
      v = value.cast<bool>() ? "1" : "0";
    } else if (py::isinstance<py::str>(value)) {
      v = value.cast<std::string>();
    } else if (PyIndex_Check(value.ptr())) {
      v = py::str(py::reinterpret_steal<py::object>(PyNumber_Index(value.ptr())));
    } else {
      throw py::value_error("state['" + k + "'] must be an int, a bool or a str, not " +
                            std::string(py::str(py::type::of(value).attr("__name__"))));
    }
    if (k.find_first_of(" \n") != std::string::npos || v.find('\n') != std::string::npos) {
      throw py::value_error("state['" + k + "'] is malformed");
    }
    text += k + " " + v + "\n";
  }
  return SourceState::Parse(text);
}

// What a loader left out, as dicts {volume, index, path, reason}.
inline pybind11::list QuarantineRecords(const std::string& volume,
                                        const std::vector<BadSample>& bad) {
  pybind11::list out;
  for (const BadSample& b : bad) {
    pybind11::dict d;
    d["volume"] = b.volume.empty() ? volume : b.volume;
    d["index"] = b.index;
    d["path"] = b.path;
    d["reason"] = b.reason;
    out.append(d);
  }
  return out;
}

// Where a Python iteration over a BatchSource stands: the epoch the next
// iter() starts, and whether the source is already there (iterated, or
// restored by load_state_dict, whose position the usual loop's set_epoch to
// the restored epoch keeps). Calls on the source hold `mu` without the GIL
// (Python threads may share one loader; the source has one caller at a time).
class SourcePosition {
 public:
  // A restored position in the middle of its epoch is never dropped
  // silently: setting another epoch raises ValueError saying how to finish
  // it, unless discard_restored says to leave the rest of it unread.
  void set_epoch(uint64_t e, bool discard_restored = false) {
    if (restored_ && e == epoch_) return;
    if (restored_ && !restored_rest_.empty() && !discard_restored) {
      const std::string E = std::to_string(epoch_), to = std::to_string(e);
      throw pybind11::value_error(
          "set_epoch(" + to + "): load_state_dict() restored a position in the middle of epoch " +
          E + " (" + restored_rest_ + "), and starting epoch " + to +
          " would drop the rest of it. To finish epoch " + E + " first, call set_epoch(" + E +
          ") (or iterate without set_epoch), e.g. `for epoch in range(state[\"epoch\"], "
          "epochs)`; to leave it unread, call set_epoch(" +
          to + ", discard_restored=True)");
    }
    epoch_ = e;
    positioned_ = restored_ = false;
    restored_rest_.clear();
  }
  uint64_t epoch() const { return epoch_; }

  void Start(BatchSource& source, std::mutex& mu) {
    pybind11::gil_scoped_release release;
    std::lock_guard lock(mu);
    source.SetEpoch(epoch_);  // keeps a position LoadState just restored
    positioned_ = true;
    restored_ = false;
  }

  // The source's state; before it is iterated, the start of the epoch set.
  Result<SourceState> Save(BatchSource& source, std::mutex& mu) const {
    Result<SourceState> s = SourceState{};
    {
      pybind11::gil_scoped_release release;
      std::lock_guard lock(mu);
      s = source.SaveState();
    }
    if (s.ok() && !positioned_) {
      s->epoch = epoch_;
      s->batches = 0;
      s->done.clear();
    }
    return s;
  }

  Status Load(BatchSource& source, std::mutex& mu, const SourceState& s) {
    Status st;
    {
      pybind11::gil_scoped_release release;
      std::lock_guard lock(mu);
      st = source.LoadState(s);
    }
    if (st.ok()) {
      epoch_ = s.epoch;
      positioned_ = restored_ = true;
      restored_rest_ = MidEpoch(s);
    }
    return st;
  }

  // "3 of 10 batches handed out" when `s` is inside its epoch (batches of
  // it handed out, and more to come in the shape it was saved in), else "".
  static std::string MidEpoch(const SourceState& s) {
    if (!s.done.empty()) return "continued from an earlier job; more batches to come";
    if (s.batches == 0) return "";
    Result<Sampler> sampler = Sampler::Create(s.samples, s.sampler);
    const uint64_t total = sampler.ok() ? sampler->batches_per_epoch() : 0;
    if (total != 0 && s.batches >= total) return "";  // saved at the end of the epoch
    return std::to_string(s.batches) + " of " + (total ? std::to_string(total) : "its") +
           " batches handed out";
  }

 private:
  uint64_t epoch_ = 0;
  bool positioned_ = false;    // the source is at epoch_ (iterated or restored)
  bool restored_ = false;      // by load_state_dict, and not iterated since
  std::string restored_rest_;  // MidEpoch of the state restored, while restored_
};

// This rank's sample indices in `epoch`, in reading order, as an int64
// array: of `mixture` when there is one (each within its sample's volume),
// else of `loader`.
inline pybind11::array_t<int64_t> RankIndicesArray(const MixtureSource* mixture,
                                                   const Loader& loader, uint64_t epoch) {
  std::vector<uint64_t> idx;
  if (mixture) {
    for (const auto& [v, i] : mixture->RankSamples(epoch)) idx.push_back(i);
  } else {
    idx = loader.RankIndices(epoch);
  }
  return pybind11::array_t<int64_t>(static_cast<pybind11::ssize_t>(idx.size()),
                                    reinterpret_cast<const int64_t*>(idx.data()));
}

}  // namespace dlfs
