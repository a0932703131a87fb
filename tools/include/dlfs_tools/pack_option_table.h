// The packer's options, each declared once (dlfs_tools/option_table.h): the flags
// of `dlfs pack` (apps/dlfs/pack_verb.cc) and the keywords of dlfs.pack
// (python/bind_writer.cc), the first kPackPositional of which may also be
// given by position. A new option is one entry here; its default is its
// field's in PackConfig.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "dlfs/builder.h"
#include "dlfs/image_prep_options.h"
#include "dlfs/pack.h"
#include "dlfs_tools/option_table.h"

namespace dlfs::options {

// What the pack options set: PackOptions, and the texts of the options the
// packer parses itself once all are known (fields, compress with dict).
struct PackConfig {
  PackOptions pack;
  std::string fields;    // "jpg,cls" (ParseFieldNames)
  std::string compress = "none";  // "zstd[:LEVEL]" (ParseCompression, with dict)
  bool dict = false;     // train a zstd dictionary
};

// PackOptions from `config`: its fields and compress texts parsed (for
// fields, only when given: dlfs.pack may have set the list itself).
// InvalidArgument for a bad compress text, in PackOptions' words (reword
// with kPackFlagWords for the CLI).
inline Result<PackOptions> ResolvePack(PackConfig config) {
  if (!config.fields.empty()) config.pack.fields = ParseFieldNames(config.fields);
  auto compression = ParseCompression(config.compress, config.dict);
  if (!compression.ok()) return compression.status();
  config.pack.volume.compress = std::move(*compression);
  return std::move(config.pack);
}

template <typename T>
using PackOption = Option<PackConfig, T>;
using BuilderOptions = VolumeBuilder::Options;

inline constexpr auto kPackOptions = std::tuple{
    PackOption<SourceKind>{.keyword = "source_kind",
                           .field = &At<&PackConfig::pack, &PackOptions::from>,
                           .flag = "--from",
                           .help = "Importer",
                           .names = kSourceKindNames},
    PackOption<bool>{

        .keyword = "force",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::overwrite>,
        .settings = {{{"-f,--force", true, "Replace the output if it exists"}}}},
    PackOption<uint32_t>{

        .keyword = "align",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::align>,
        .flag = "--align",
        .help = "Start every sample at a multiple of this many bytes (power of two, <= 1 MiB)"},
    PackOption<bool>{

        .keyword = "skip_unreadable",
        .field = &At<&PackConfig::pack, &PackOptions::skip_unreadable>,
        .settings = {{{"--skip-unreadable", true,
                       "Skip (and count) source files that cannot be read instead of stopping"}}}},
    PackOption<std::vector<std::string>>{

        .keyword = "class_names",
        .field = &At<&PackConfig::pack, &PackOptions::class_names>,
        .flag = "--class-names",
        .help = "Names of labels 0, 1, ...: \"a,b,c\" or @FILE with one name per line. An\n"
                "ImageFolder tree's classes are its directories: one name per directory, in\n"
                "sorted order, renames them",
        .parse = +[](std::string_view spec) { return ParseClassNames(std::string(spec)); },
        .python_object = true},
    PackOption<bool>{

        .keyword = "all_files",
        .field = &At<&PackConfig::pack, &PackOptions::all_files>,
        .settings = {{{"--all-files", true,
                       "imagefolder: pack every regular file (files at the root too), not only "
                       "the\nimages torchvision's ImageFolder would load"}}}},
    PackOption<DirectoryLayout>{
        .keyword = "layout",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::layout>,
        .flag = "--layout",
        .help = "Directory layout (docs/format.md): compact (format v3: 6-10 B per sample,\n"
                "used in place, indices in the order packed), tree (v1/v2: 32 B per sample,\n"
                "read whole at open; needed for fields, --compress and image preparation),\n"
                "auto (compact unless the source or options need tree)",
        .names = kDirectoryLayoutNames},
    PackOption<bool>{

        .keyword = "skip_hidden",
        .field = &At<&PackConfig::pack, &PackOptions::skip_hidden>,
        .settings = {{{"--skip-hidden", true,
                       "imagefolder: leave out hidden files and directories (names starting "
                       "with '.',\ne.g. .ipynb_checkpoints), which torchvision's ImageFolder "
                       "reads: the labels\nthen differ from torchvision's where a hidden "
                       "directory is at the top"}}}},
    PackOption<bool>{

        .keyword = "datum_payload",
        .field = &At<&PackConfig::pack, &PackOptions::lmdb_payload_only>,
        .settings = {{{"--datum-payload", true,
                       "lmdb: store only each Caffe Datum's data (e.g. the JPEG), not the "
                       "whole record"}}}},
    // Token corpora: a token volume (docs/format.md §10.11), one document
    // per Megatron sequence or per cut of a token file.
    PackOption<std::string>{

        .keyword = "token_dtype",
        .field = &At<&PackConfig::pack, &PackOptions::token_dtype>,
        .flag = "--token-dtype",
        .help = "megatron, tokens: store token ids as uint16 or uint32. By default uint16 when\n"
                "every id fits (known from a uint8/int8/int16/uint16 dtype; int32, int64 and\n"
                "uint32 sources are scanned once for their largest id), else uint32. Required\n"
                "for a flat binary token file, whose dtype it also is",
        .show_default = false},
    PackOption<std::string>{

        .keyword = "lengths",
        .field = &At<&PackConfig::pack, &PackOptions::lengths>,
        .flag = "--lengths",
        .help = "tokens: cut the tokens into documents of these lengths (in tokens): a .npy\n"
                "array or a text file with one per line, summing to the token count",
        .show_default = false},
    PackOption<std::optional<uint64_t>>{

        .keyword = "eod",
        .field = &At<&PackConfig::pack, &PackOptions::eod>,
        .flag = "--eod",
        .help = "tokens: cut the tokens after each end-of-document token ID (kept at the end of "
                "its\ndocument); tokens after the last one are the last document"},
    PackOption<uint32_t>{

        .keyword = "targets",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::targets>,
        .flag = "--targets",
        .help = "Spread the samples over N target files (1..8), e.g. on N devices. Target 0 is\n"
                "the -o file and holds the directory; targets 1..N-1 are OUT.t1 .. OUT.t<N-1>\n"
                "unless named with --target-path. Each sample goes to the target holding the\n"
                "fewest bytes so far",
        .show_default = false,
        .min = 1,
        .max = 8,
        .none_keeps_default = true},
    // One path per flag (paths may hold commas): see AddPack.
    PackOption<std::vector<std::string>>{

        .keyword = "target_paths",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::target_paths>,
        .flag = "--target-path",
        .help = "Path of the next target (repeat: target 1, target 2, ...); implies --targets.\n"
                "Stored relative to OUT's directory when inside it, else absolute",
        .show_default = false},
    PackOption<std::string>{

        .keyword = "fields",
        .field = &At<&PackConfig::fields>,
        .flag = "--fields",
        .help = "tar: keep only these fields of each key, e.g. jpg,cls (labels still come from\n"
                "the .cls members)",
        .show_default = false,
        .python_object = true},
    PackOption<std::string>{.keyword = "compress",
                            .field = &At<&PackConfig::compress>,
                            .flag = "--compress",
                            .help = "zstd[:LEVEL]: compress each field with zstd (default level "
                                    "3), keeping it raw\nwhen that saves less than 3 %",
                            .show_default = false},
    PackOption<bool>{

        .keyword = "dict",
        .field = &At<&PackConfig::dict>,
        .settings = {{{"--dict", true,
                       "With --compress: train a zstd dictionary (up to 110 KiB) on the first 8 "
                       "MiB\nor 10000 fields, store it in the volume and compress every field "
                       "with it.\nFor many small, similar fields (records, token arrays, raw "
                       "pixels). Fails on\ntoo little data to train on"}}}},
    // Image preparation (dlfs/image_prep.h), FFCV-style.
    PackOption<uint32_t>{

        .keyword = "max_side",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::images,
                     &ImagePrepOptions::max_side>,
        .flag = "--max-side",
        .help = "Resize images whose longer side exceeds N pixels so that it is N (the shorter\n"
                "side in proportion, torchvision's geometry and PIL's pixels; never enlarged)",
        .show_default = false,
        .min = 1,
        .max = 1u << 20,
        .none_keeps_default = true},
    PackOption<ResizeFilter>{.keyword = "resize_filter",
                             .field = &At<&PackConfig::pack, &PackOptions::volume,
                                          &BuilderOptions::images, &ImagePrepOptions::filter>,
                             .flag = "--resize-filter",
                             .help = "PIL filter for --max-side (antialiased)",
                             .names = kResizeFilterNames},
    PackOption<uint32_t>{

        .keyword = "jpeg_quality",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::images,
                     &ImagePrepOptions::jpeg_quality>,
        .flag = "--jpeg-quality",
        .help = "Re-encode JPEGs at quality Q (1..100), keeping an original that needs no resize\n"
                "when re-encoding would not make it smaller; encoded JPEGs use 90 without it",
        .show_default = false,
        .min = 1,
        .max = 100,
        .none_keeps_default = true},
    PackOption<bool>{

        .keyword = "always_reencode",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::images,
                     &ImagePrepOptions::always_reencode>,
        .settings = {{{"--always-reencode", true,
                       "Re-encode every image, even one that needs no resize, and keep the "
                       "result even\nwhen it is larger than the original"}}}},
    PackOption<ImageStoreMode>{

        .keyword = "image_format",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::images,
                     &ImagePrepOptions::mode>,
        .flag = "--image-format",
        .help = "How images are stored: keep (their own format), jpeg, raw (decoded uint8 HWC\n"
                "pixels: no decoding when read), smart (raw up to --smart-threshold bytes of\n"
                "pixels, JPEG above), proportion (JPEG with probability --jpeg-probability)",
        .names = kImageStoreModeNames},
    PackOption<uint64_t>{

        .keyword = "smart_threshold",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::images,
                     &ImagePrepOptions::smart_threshold>,
        .flag = "--smart-threshold",
        .help = "--image-format smart: the largest image stored raw, in bytes of pixels"},
    PackOption<double>{.keyword = "jpeg_probability",
                       .field = &At<&PackConfig::pack, &PackOptions::volume,
                                    &BuilderOptions::images, &ImagePrepOptions::jpeg_probability>,
                       .flag = "--jpeg-probability",
                       .help = "--image-format proportion: the share of images stored as JPEG"},
    PackOption<uint64_t>{.keyword = "image_seed",
                         .field = &At<&PackConfig::pack, &PackOptions::volume,
                                      &BuilderOptions::images, &ImagePrepOptions::seed>,
                         .flag = "--image-seed",
                         .help = "--image-format proportion: the seed of which images are JPEG"},
    PackOption<ColorMode>{

        .keyword = "image_color",
        .field = &At<&PackConfig::pack, &PackOptions::volume, &BuilderOptions::images,
                     &ImagePrepOptions::color>,
        .flag = "--image-color",
        .help = "Channels of decoded images: rgb (PIL's convert(\"RGB\")), gray, or auto (1 for\n"
                "gray sources, 3 for the others)",
        .names = kColorModeNames},
    PackOption<uint32_t>{.keyword = "prepare_threads",
                         .field = &At<&PackConfig::pack, &PackOptions::volume,
                                      &BuilderOptions::images, &ImagePrepOptions::threads>,
                         .flag = "--prepare-threads",
                         .help = "Threads preparing images (default: one per core)",
                         .show_default = false},
};

// dlfs.pack's keywords that may be given by position, after source and
// output: the first entries of kPackOptions, as it has always taken them.
inline constexpr size_t kPackPositional = 6;

// Pack names the PackOptions field that would change an error or the
// report; `dlfs pack` says which flag of kPackOptions sets it instead.
inline constexpr Rewording kPackFlagWords[] = {
    {"(set overwrite to", "(use --force to"},
    {"(set skip_unreadable to", "(use --skip-unreadable to"},
    {"the fields option applies", "--fields applies"},
    {"the all_files option applies", "--all-files applies"},
    {"the lmdb_payload_only option applies", "--datum-payload applies"},
    {"all_files packs", "--all-files packs"},
    {"the skip_hidden option applies", "--skip-hidden applies"},
    {"skip_hidden left out", "--skip-hidden left out"},
    {"skip_hidden leaves", "--skip-hidden leaves"},
    {"(target_paths)", "(--target-path)"},
    {"target_paths (or none)", "--target-path options (or none)"},
    {"a trained dictionary needs zstd compression", "--dict needs --compress zstd[:LEVEL]"},
    {"compression '", "--compress '"},
    {"align must", "--align must"},
    {": class_names gives", ": --class-names gives"},
    {"class_names renamed", "--class-names renamed"},
    {"needs the lmdb_payload_only option", "needs --datum-payload"},
    {"jpeg_probability must", "--jpeg-probability must"},
    {"smart_threshold must", "--smart-threshold must"},
    {"a token volume (token_width)", "a token volume"},
    {"the token_dtype option", "--token-dtype"},
    {"the lengths option", "--lengths"},
    {"the eod option", "--eod"}};

}  // namespace dlfs::options
