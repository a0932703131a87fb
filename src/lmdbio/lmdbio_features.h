// What each LMDBIO mode does, as named switches: the readers test these,
// never the mode itself, so a mode is defined in exactly one place
// (FeaturesOf) and the modes' order in the enum carries no meaning.
#pragma once

#include "dlfs/lmdbio.h"

namespace dlfs::lmdbio {

struct LmdbioFeatures {
  // Records are served from the node's MPI-3 shared window, filled by the
  // node's readers. Off (baseline): every rank walks its own liblmdb cursor.
  bool shared_window = false;
  // One reader per node, whose cursor steps over the records of the other
  // nodes (lmm). Otherwise options.readers_per_node readers per node.
  bool one_reader_skips_others = false;
  // The readers of the job pass one cursor (the key of the next record) from
  // reader to reader, so none walks past records it does not keep.
  bool cursor_handoff = false;
  // Each reader asks the kernel to read ahead the pages its next fetch is
  // predicted to touch (madvise WILLNEED on the mmap).
  bool speculative_prefetch = false;
  // Values reach the window by pread / io_uring of their byte ranges, not
  // by copying from liblmdb's mmap.
  bool explicit_reads = false;
  // The record map (every value's byte range) is parsed from data.mdb once,
  // by rank 0, and broadcast: no cursor and no mmap during training.
  bool record_map_from_parser = false;
  // One read step serves several iterations (about coalesce_bytes per reader).
  bool coalesce_iterations = false;
  // Readers take turns in groups of stagger_group.
  bool staggered_turns = false;
};

// The features of options.mode; options.prefetch gates speculative_prefetch.
constexpr LmdbioFeatures FeaturesOf(const LmdbioOptions& options) {
  switch (options.mode) {
    case LmdbioMode::kBaseline:
      return {};
    case LmdbioMode::kLmm:
      return {.shared_window = true, .one_reader_skips_others = true};
    case LmdbioMode::kLmmDm:
      return {
          .shared_window = true, .cursor_handoff = true, .speculative_prefetch = options.prefetch};
    case LmdbioMode::kLmmDio:
      return {.shared_window = true, .cursor_handoff = true, .explicit_reads = true};
    case LmdbioMode::kLmmDioProv:
      return {.shared_window = true, .explicit_reads = true, .record_map_from_parser = true};
    case LmdbioMode::kLmmDioProvCoal:
      return {.shared_window = true,
              .explicit_reads = true,
              .record_map_from_parser = true,
              .coalesce_iterations = true};
    case LmdbioMode::kLmmDioProvCoalStag:
      return {.shared_window = true,
              .explicit_reads = true,
              .record_map_from_parser = true,
              .coalesce_iterations = true,
              .staggered_turns = true};
  }
  return {};
}

}  // namespace dlfs::lmdbio
