// TargetKind: what holds a target of a volume, as it was opened here — a
// file, a block device, an NBD export or an S3 object (TargetInfo::kind in dlfs/volume.h,
// `dlfs info`). A header of its own because the I/O layer, which opens
// targets (src/io), names it and sits below the volume: a lower layer never
// includes a higher one (scripts/check-layering.py).
#pragma once

#include <cstdint>

#include "dlfs/enum_names.h"

namespace dlfs {

enum class TargetKind : uint8_t { kFile, kBlockDevice, kNbdExport, kNotOpen, kS3Object };
inline constexpr EnumName<TargetKind> kTargetKindNames[] = {
    {TargetKind::kFile, "file"},
    {TargetKind::kBlockDevice, "block device"},
    {TargetKind::kNbdExport, "NBD export"},
    {TargetKind::kNotOpen, "not open here"},
    {TargetKind::kS3Object, "S3 object"}};

}  // namespace dlfs
