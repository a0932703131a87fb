// The decode pipeline's options that `dlfs cat --decode` and `dlfs bench
// --decode` take, each declared once (dlfs_tools/option_table.h): the flags of
// both (kDecodeOptions), and bench's flags for the output and the decode
// stage (kDecodeStageFlags). Their defaults are the fields' own.
#pragma once

#include <cstdint>
#include <tuple>
#include <vector>

#include "dlfs/decode.h"
#include "dlfs/decode_stage.h"
#include "dlfs/sample_image.h"
#include "dlfs_tools/option_table.h"

namespace dlfs::options {

template <typename T>
using ImageOption = Option<ImageOptions, T>;

// How a sample is decoded and transformed.
inline constexpr auto kDecodeOptions = std::tuple{
    ImageOption<CropMode>{.field = &At<&ImageOptions::transform, &TransformOptions::crop>,
                          .flag = "--crop",
                          .help = "With --size: Resize+CenterCrop, or RandomResizedCrop",
                          .names = kCropModeNames},
    ImageOption<uint32_t>{
        .field = &At<&ImageOptions::transform, &TransformOptions::resize>,
        .flag = "--resize",
        .help = "--crop center: resize the shorter side to this first (default: --size)",
        .show_default = false},
    ImageOption<bool>{.field = &At<&ImageOptions::transform, &TransformOptions::flip>,
                      .settings = {{{"--flip", true, "Random horizontal flip (p = 0.5)"}}}},
    ImageOption<ColorMode>{.field = &At<&ImageOptions::decode, &DecodeOptions::color>,
                           .flag = "--color",
                           .help = "Channels: the image's own, or forced",
                           .names = kColorModeNames},
    ImageOption<RawShape>{.field = &At<&ImageOptions::decode, &DecodeOptions::raw>,
                          .flag = "--raw-shape",
                          .help = "Samples that are neither JPEG nor PNG are raw pixels of this "
                                  "shape (HxW or HxWxC)",
                          .parse = &ParseRawShape},
    ImageOption<uint64_t>{.field = &At<&ImageOptions::decode, &DecodeOptions::max_pixels>,
                          .flag = "--max-pixels",
                          .help = "Refuse images of more pixels (from their header)"},
    ImageOption<bool>{
        .field = &At<&ImageOptions::decode, &DecodeOptions::dct_scaling>,
        .settings = {{{"--no-dct-scaling", false,
                       "Always decode JPEGs at full scale (no 1/2, 1/4, 1/8 DCT scaling)"}}}},
};

template <typename T>
using DecodeStageOption = Option<DecodeStageOptions, T>;

// `dlfs bench --decode`'s output images and decode stage.
inline constexpr auto kDecodeStageFlags = std::tuple{
    DecodeStageOption<DType>{
        .field = &At<&DecodeStageOptions::image, &ImageOptions::output, &OutputOptions::dtype>,
        .flag = "--dtype",
        .help = "Output element type",
        .names = kDTypeNames},
    DecodeStageOption<OutputLayout>{
        .field = &At<&DecodeStageOptions::image, &ImageOptions::output, &OutputOptions::layout>,
        .flag = "--layout",
        .help = "Output layout",
        .names = kOutputLayoutNames},
    DecodeStageOption<std::vector<float>>{
        .field = &At<&DecodeStageOptions::image, &ImageOptions::output, &OutputOptions::mean>,
        .flag = "--mean",
        .help = "With --dtype float32: per-channel mean (0..1 units)",
        .show_default = false},
    DecodeStageOption<std::vector<float>>{
        .field = &At<&DecodeStageOptions::image, &ImageOptions::output, &OutputOptions::std>,
        .flag = "--std",
        .help = "With --dtype float32: per-channel std (0..1 units)",
        .show_default = false},
    DecodeStageOption<uint32_t>{.field = &At<&DecodeStageOptions::decode_threads>,
                                .flag = "--decode-threads",
                                .help = "Decode threads (0: one per core)"},
    DecodeStageOption<uint32_t>{.field = &At<&DecodeStageOptions::prefetch_batches>,
                                .flag = "--decode-prefetch",
                                .help = "Batches queued for decoding"},
    DecodeStageOption<bool>{
        .field = &At<&DecodeStageOptions::skip_bad_samples>,
        .settings = {{{"--skip-bad", true,
                       "Skip and count undecodable samples instead of failing"}}}},
};

}  // namespace dlfs::options
