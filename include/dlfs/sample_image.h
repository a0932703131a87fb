// DecodeSample: one sample of a volume as the decode pipeline makes it, as
// 8-bit HWC pixels one can look at or save with EncodePng (what `dlfs cat
// --decode` writes); ParseRawShape for tools that take a raw shape as text.
//
// Thread safety: as Volume::Read; each call uses its own workspace.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

#include "dlfs/decode.h"
#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

// Reads sample `index` of `volume` (checksum checked when `verify`) and
// decodes it with options.decode. With `epoch`, also applies
// options.transform as the pipeline does to this sample in that epoch (its
// random choices from options.transform.seed, the epoch and the index);
// options.output does not apply: the pixels are uint8 HWC either way.
// Errors: the read's; a decoder's or options' error naming the volume and
// the sample ("VOLUME: sample N (PATH): ...").
Result<Image> DecodeSample(const Volume& volume, uint64_t index, const ImageOptions& options,
                           std::optional<uint64_t> epoch, bool verify = true);

// "HxW" or "HxWxC" (e.g. "28x28", "32x32x3") as a RawShape: the shape of
// raw samples. InvalidArgument saying what is expected otherwise.
Result<RawShape> ParseRawShape(std::string_view text);

}  // namespace dlfs
