// dlfs._TokenLoader: the C++ TokenLoader (dlfs/tokens.h) for
// dlfs.torch.TokenDataset. Batches are written into the caller's numpy
// array (int64 or int32, (batch_size, seq_len + 1)) with the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "dlfs/tokens.h"
#include "status_bridge.h"

namespace py = pybind11;

namespace dlfs::python {
namespace {

template <typename T>
py::array_t<T> ToArray(const std::vector<T>& v) {
  py::array_t<T> a(static_cast<py::ssize_t>(v.size()));
  std::copy(v.begin(), v.end(), a.mutable_data());
  return a;
}

py::dict StateDict(const TokenStreamState& s) {
  py::dict d;
  d["epoch"] = s.epoch;
  d["position"] = s.position;
  d["segment_start"] = s.segment_start;
  d["weights_hash"] = s.weights_hash;
  d["sources_hash"] = s.sources_hash;
  d["counts"] = s.counts;
  return d;
}

TokenStreamState StateOf(const py::dict& d) {
  TokenStreamState s;
  try {
    s.epoch = d["epoch"].cast<uint64_t>();
    s.position = d["position"].cast<uint64_t>();
    s.segment_start = d["segment_start"].cast<uint64_t>();
    s.weights_hash = d["weights_hash"].cast<uint64_t>();
    s.sources_hash = d["sources_hash"].cast<uint64_t>();
    s.counts = d["counts"].cast<std::vector<uint64_t>>();
  } catch (const py::error_already_set&) {
    throw py::value_error(
        "not a token stream state: it needs epoch, position, segment_start, "
        "weights_hash, sources_hash and counts");
  } catch (const py::cast_error&) {
    throw py::value_error("not a token stream state: a field has the wrong type");
  }
  return s;
}

}  // namespace

void RegisterTokens(py::module_& m) {
  py::class_<TokenLoader>(m, "_TokenLoader",
                          "Batches of token windows from token volumes (dlfs/tokens.h); "
                          "used by dlfs.torch.TokenDataset.")
      .def(py::init([](const std::vector<std::pair<std::string, double>>& sources, uint64_t seq_len,
                       uint64_t batch_size, uint64_t seed, bool shuffle,
                       const std::string& windowing, int64_t pad_id, uint64_t epoch_windows,
                       uint32_t rank, uint32_t world_size, bool drop_last, bool verify,
                       const std::string& engine, bool megatron, const std::string& split,
                       uint32_t split_index, uint64_t num_samples, bool weighted, double surplus,
                       bool drop_last_partial, const py::object& direct_io) {
             std::vector<TokenSource> specs;
             for (const auto& [path, weight] : sources) specs.push_back({path, weight});
             TokenLoaderOptions o;
             o.seq_len = seq_len;
             o.batch_size = batch_size;
             o.seed = seed;
             o.shuffle = shuffle;
             if (windowing == "across") {
               o.windowing = TokenWindowing::kAcross;
             } else if (windowing == "document") {
               o.windowing = TokenWindowing::kDocument;
             } else {
               throw py::value_error("windows must be 'across' or 'document', not '" + windowing +
                                     "'");
             }
             o.pad_id = pad_id;
             o.epoch_windows = epoch_windows;
             o.rank = rank;
             o.world_size = world_size;
             o.drop_last = drop_last;
             o.verify = verify;
             o.engine.kind = Unwrap(ParseEngineKind(engine));
             o.reads = direct_io.is_none()      ? TokenLoaderOptions::Reads::kAuto
                       : direct_io.cast<bool>() ? TokenLoaderOptions::Reads::kDirect
                                                : TokenLoaderOptions::Reads::kPageCache;
             o.megatron.enabled = megatron;
             o.megatron.split = split;
             o.megatron.split_index = split_index;
             o.megatron.num_samples = num_samples;
             o.megatron.weighted = weighted;
             o.megatron.surplus = surplus;
             o.megatron.drop_last_partial = drop_last_partial;
             py::gil_scoped_release release;
             return Unwrap(TokenLoader::Open(specs, o));
           }),
           py::arg("sources"), py::arg("seq_len"), py::arg("batch_size"), py::arg("seed"),
           py::arg("shuffle"), py::arg("windows"), py::arg("pad_id"), py::arg("epoch_windows"),
           py::arg("rank"), py::arg("world_size"), py::arg("drop_last"), py::arg("verify"),
           py::arg("engine"), py::arg("megatron") = false, py::arg("split") = "1",
           py::arg("split_index") = 0, py::arg("num_samples") = 0, py::arg("weighted") = false,
           py::arg("surplus") = 0.005, py::arg("drop_last_partial") = true,
           py::arg("direct_io") = py::none())
      .def_property_readonly("window_tokens", &TokenLoader::window_tokens)
      .def_property_readonly("description", &TokenLoader::description)
      .def_property_readonly("windows_per_epoch", &TokenLoader::windows_per_epoch)
      .def_property_readonly("batches_per_epoch", &TokenLoader::batches_per_epoch)
      .def_property_readonly("source_windows",
                             [](const TokenLoader& l) {
                               const auto s = l.source_windows();
                               return std::vector<uint64_t>(s.begin(), s.end());
                             })
      .def("batches_after", &TokenLoader::batches_after, py::arg("position"))
      .def(
          "read_batch",
          [](TokenLoader& l, uint64_t epoch, uint64_t batch, py::array out, uint64_t start,
             const py::object& position_ids) {
            if (out.ndim() != 2 || !(out.flags() & py::array::c_style) || !out.writeable() ||
                static_cast<uint64_t>(out.size()) != l.batch_tokens()) {
              throw py::value_error("read_batch: out must be a writable C-contiguous (batch, " +
                                    std::to_string(l.window_tokens()) + ") array");
            }
            TokenBatchInfo info;
            if (py::isinstance<py::array_t<int64_t>>(out) && out.itemsize() == 8) {
              std::span<int64_t> s(static_cast<int64_t*>(out.mutable_data()), out.size());
              py::gil_scoped_release release;
              Check(l.ReadBatch(epoch, batch, s, &info, start));
            } else if (py::isinstance<py::array_t<int32_t>>(out) && out.itemsize() == 4) {
              std::span<int32_t> s(static_cast<int32_t*>(out.mutable_data()), out.size());
              py::gil_scoped_release release;
              Check(l.ReadBatch(epoch, batch, s, &info, start));
            } else {
              throw py::value_error("read_batch: out must be int64 or int32");
            }
            // cu_seqlens over the flattened inputs (rows of seq_len tokens):
            // each row's start, each document start inside it, the end.
            const uint64_t seq = l.window_tokens() - 1;
            std::vector<int32_t> cu;
            cu.reserve(info.windows + info.starts.size() + 1);
            for (uint64_t r = 0; r < info.windows; ++r) {
              cu.push_back(static_cast<int32_t>(r * seq));
              for (uint64_t k = info.row_starts[r]; k < info.row_starts[r + 1]; ++k) {
                if (info.starts[k] < seq)
                  cu.push_back(static_cast<int32_t>(r * seq + info.starts[k]));
              }
            }
            cu.push_back(static_cast<int32_t>(info.windows * seq));
            if (!position_ids.is_none()) {
              auto pos = position_ids.cast<py::array_t<int64_t, py::array::c_style>>();
              if (pos.ndim() != 2 || static_cast<uint64_t>(pos.shape(0)) != info.windows ||
                  static_cast<uint64_t>(pos.shape(1)) != seq || !pos.writeable()) {
                throw py::value_error("read_batch: position_ids must be a writable (batch, " +
                                      std::to_string(seq) + ") int64 array");
              }
              int64_t* p = pos.mutable_data();
              for (uint64_t r = 0; r < info.windows; ++r) {
                uint64_t k = info.row_starts[r], last = 0;
                for (uint64_t t = 0; t < seq; ++t) {
                  if (k < info.row_starts[r + 1] && info.starts[k] == t) last = info.starts[k++];
                  p[r * seq + t] = static_cast<int64_t>(t - last);
                }
              }
            }
            py::dict d;
            d["cu_seqlens"] = ToArray(cu);
            d["positions"] = ToArray(info.positions);
            d["sources"] = ToArray(info.sources);
            d["first_tokens"] = ToArray(info.first_tokens);
            d["starts"] = ToArray(info.starts);
            d["row_starts"] = ToArray(info.row_starts);
            d["lengths"] = ToArray(info.lengths);
            return d;
          },
          py::arg("epoch"), py::arg("batch"), py::arg("out"), py::arg("start") = 0,
          py::arg("position_ids") = py::none())
      .def(
          "state_at",
          [](const TokenLoader& l, uint64_t epoch, uint64_t consumed) {
            return StateDict(l.StateAt(epoch, consumed));
          },
          py::arg("epoch"), py::arg("consumed"))
      .def(
          "resume",
          [](TokenLoader& l, const py::dict& state) { return Unwrap(l.Resume(StateOf(state))); },
          py::arg("state"));
}

}  // namespace dlfs::python
