// A BatchSource's SourceState as the dict Python's state_dict() returns and
// load_state_dict() takes: the keys of its text form (dlfs/batch_source.h),
// flags as bools, the epoch's earlier parts (elastic resume) as the
// "segments" string, the samples left out as bad as the "quarantine" string
// "3,17". Shared by the bindings of Loader and ImageLoader.
#pragma once

#include <pybind11/pybind11.h>

#include <string>
#include <vector>

#include "dlfs/batch_source.h"

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
  return d;
}

// The dict back, through the text form's parser (which names a missing,
// unknown or malformed key). Version 1 of the text form, whose "segments"
// is optional: a dict saved before elastic resume existed still loads.
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

// A quarantine list given to a loader: sample indices, or the records of
// `dlfs verify --json` / quarantine() (dicts with an "index").
inline std::vector<uint64_t> QuarantineIndices(const pybind11::handle& list) {
  namespace py = pybind11;
  std::vector<uint64_t> out;
  for (py::handle item : list) {
    py::handle index = py::isinstance<py::dict>(item) ? item.cast<py::dict>()["index"] : item;
    out.push_back(index.cast<uint64_t>());
  }
  return out;
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

}  // namespace dlfs
