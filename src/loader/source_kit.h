// Internal: what other batch sources build on of the loader — the one header
// of src/loader that modules outside it include (scripts/check-layering.py
// holds them to it). Its users: the MPI ShardLoader (src/mpi) and decode's
// stages (src/decode), which make batches of their own.
//
//   Batch::Data         what a Batch holds                   (batch_data.h)
//   ResolveFields,      a volume's fields by name; a batch's  (fields.h)
//   SplitFields,        samples split into fields, compressed
//   DecodedBuffers      ones decoded, each field's CRC checked
//   Quarantine          bad samples left out, and the budget  (quarantine.h)
//   SampleSizes,        the mean, spread and largest of the   (batch_planner.h)
//   MeasureSampleSizes  samples read (buffers, placement)
//
// Anything else of the loader a new source needs is added here, named, and
// not reached for through another of its headers.
#pragma once

#include "loader/batch_data.h"
#include "loader/batch_planner.h"
#include "loader/fields.h"
#include "loader/quarantine.h"
