// Fields in batches (LoaderOptions::fields, format v2 docs/format.md §4.8):
// shared by the Loader and the MPI ShardLoader, which both read each
// sample's whole stored extent and split it here, on the caller's thread.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dlfs/status.h"
#include "dlfs/volume.h"
#include "loader/batch_data.h"

namespace dlfs::loader_internal {

// The field ids of `names` in `volume`, in that order. Empty `names`:
// nothing, or NotSupported (saying to pass fields) when some sample has
// several or compressed fields, since its stored extent is then not one
// field. InvalidArgument for a name the volume lacks (listing its fields)
// or a name given twice.
Result<std::vector<uint32_t>> ResolveFields(const Volume& volume,
                                            const std::vector<std::string>& names);

// Turns `data`, whose samples are whole stored extents, into a batch of
// `fields` per sample (Batch::Data::fields): raw fields are spans into the
// extents, compressed ones are decoded into one new buffer the batch owns
// (data->decoded). With `verify`, each field's stored bytes are checked
// against its CRC32C first. payload_bytes becomes the fields' bytes.
// Errors name the volume, the sample (index and path) and the field: a
// sample lacking a requested field (NotFound), a checksum mismatch or a
// field that does not decode (Corruption); `data` must then be dropped.
// REQUIRES: !fields.empty().
Status SplitFields(const Volume& volume, std::span<const uint32_t> fields, bool verify,
                   Batch::Data* data);

}  // namespace dlfs::loader_internal
