// Per-epoch figures of a Python loader (Loader.epoch_stats(),
// ImageLoader.epoch_stats()): what each epoch handed out and where its
// bytes came from — storage, this node's cache, other nodes (the cluster
// cache, shard-local reading) — and what crossed the network, the figures
// `dlfs bench --json` prints per epoch, so a user sees that the second
// epoch came from memory. Counted in this process (this rank); sum over
// ranks for the job.
#pragma once

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>
#include <optional>
#include <vector>

#include "distributed.h"
#include "dlfs/batch.h"

namespace dlfs::python {

// Counters that only the source knows (its levels now, differenced per epoch).
struct SourceCounters {
  uint64_t cache_bytes = 0;    // samples found in this node's cache
  uint64_t network_bytes = 0;  // sent and received over MPI
};

// Holding the GIL (a ShardLoader's counters come as a dict).
inline SourceCounters CountersOf(const SourceParts& parts) {
  SourceCounters c;
  for (const Loader* l : parts.loaders) c.cache_bytes += l->source_stats().cache_hit_bytes;
  if (parts.shard_stats) {
    pybind11::dict s = parts.shard_stats();
    c.cache_bytes += s["cached_bytes"].cast<uint64_t>();
    c.network_bytes += s["bytes_sent"].cast<uint64_t>() + s["bytes_received"].cast<uint64_t>();
  }
  return c;
}

class EpochLog {
 public:
  static double Now() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  // iter(): epoch `epoch` starts (an unfinished one before it is kept as
  // it stands, marked incomplete).
  void Start(uint64_t epoch, const SourceCounters& now) {
    if (current_) done_.push_back(*current_);
    current_ = Record{.epoch = epoch, .start = Now(), .at_start = now};
  }
  void Count(const Batch& b) {
    if (!current_) return;
    ++current_->batches;
    current_->samples += b.size();
    current_->payload_bytes += b.payload_bytes();
    current_->storage_bytes += b.device_bytes();
    current_->peer_bytes += b.peer_bytes();
  }
  // The epoch ended (StopIteration).
  void Finish(const SourceCounters& now) {
    if (!current_) return;
    Close(&*current_, now);
    current_->complete = true;
    done_.push_back(*current_);
    current_.reset();
  }
  // Every epoch so far, the one in progress last.
  pybind11::list Records(const SourceCounters& now) const {
    pybind11::list out;
    for (const Record& r : done_) out.append(Dict(r));
    if (current_) {
      Record r = *current_;
      Close(&r, now);
      out.append(Dict(r));
    }
    return out;
  }

 private:
  struct Record {
    uint64_t epoch = 0;
    double start = 0;
    SourceCounters at_start;
    uint64_t batches = 0, samples = 0, payload_bytes = 0, storage_bytes = 0, peer_bytes = 0;
    uint64_t cache_bytes = 0, network_bytes = 0;
    double seconds = 0;
    bool complete = false;
  };
  static void Close(Record* r, const SourceCounters& now) {
    r->seconds = Now() - r->start;
    r->cache_bytes = now.cache_bytes - r->at_start.cache_bytes;
    r->network_bytes = now.network_bytes - r->at_start.network_bytes;
  }
  static pybind11::dict Dict(const Record& r) {
    pybind11::dict d;
    d["epoch"] = r.epoch;
    d["complete"] = r.complete;
    d["batches"] = r.batches;
    d["samples"] = r.samples;
    d["seconds"] = r.seconds;
    d["payload_bytes"] = r.payload_bytes;
    d["storage_bytes"] = r.storage_bytes;
    d["cache_bytes"] = r.cache_bytes;
    d["peer_bytes"] = r.peer_bytes;
    d["network_bytes"] = r.network_bytes;
    return d;
  }

  std::vector<Record> done_;
  std::optional<Record> current_;
};

}  // namespace dlfs::python
