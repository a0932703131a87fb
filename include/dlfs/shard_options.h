// Options of the MPI ShardLoader (dlfs/distributed.h), in a header that needs
// no MPI so that programs built either way can hold them.
#pragma once

#include <cstdint>

#include "dlfs/loader.h"

namespace dlfs {

struct ShardLoaderOptions {
  // rank and world_size are taken from the communicator; `fields` works as
  // in a Loader (split and decoded in Next(), after the exchange).
  LoaderOptions loader;
  // Batches whose remote samples are fetched in one exchange; the exchange
  // for the next window happens when the current one is used up.
  uint32_t window_batches = 8;
  // Plan the next window and read its local part on a thread while the
  // current one is consumed. Off by default: the thread competes with the
  // exchange and checksums for cores (measured in docs/benchmarks.md); worth
  // trying where cores are spare and storage latency is high.
  bool read_ahead = false;
  // Instead of node-local targets: the job's node caches as one cache of a
  // volume every rank can read (ShardLoader in dlfs/distributed.h).
  // loader.cache_budget is each node's budget (auto: a quarter of what the
  // node's first rank may use).
  bool cluster_cache = false;
};

}  // namespace dlfs
