// The LmdbioReader implementations, opened by LmdbioReader::Open once the
// ranks have agreed on the options, the database and the node layout.
//
//   baseline_reader.cc        baseline: a liblmdb cursor on every rank
//   window_reader.{h,cc}      what the windowed modes share: the node's
//                             readers, the shared window, Next()
//   cursor_window_reader.cc   lmm, lmm-dm, lmm-dio: readers walk a cursor
//   map_window_reader.cc      lmm-dio-prov and up: readers read the byte
//                             ranges of the parser's record map
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "dlfs/lmdbio.h"
#include "dlfs/mpi.h"
#include "lmdbio/lmdbio_features.h"

namespace dlfs::lmdbio {

// Each takes ownership of `comm` (the reader's private duplicate), also on
// failure. Collective over `comm`; an error is the same on every rank.
Result<std::unique_ptr<LmdbioReader>> OpenBaselineReader(MPI_Comm comm, const std::string& path,
                                                         const LmdbioOptions& options);
Result<std::unique_ptr<LmdbioReader>> OpenCursorWindowReader(MPI_Comm comm, NodeTopology topo,
                                                             const std::string& path,
                                                             const LmdbioOptions& options,
                                                             const LmdbioFeatures& features);
Result<std::unique_ptr<LmdbioReader>> OpenMapWindowReader(MPI_Comm comm, NodeTopology topo,
                                                          const std::string& path,
                                                          const LmdbioOptions& options,
                                                          const LmdbioFeatures& features);

}  // namespace dlfs::lmdbio
