// `dlfs pack`: Pack (dlfs/pack.h) with a progress line and a summary.
#include <atomic>
#include <csignal>
#include <cstdio>

#include "cli.h"
#include "dlfs/image_prep.h"
#include "dlfs/pack.h"

namespace dlfs::cli {
namespace {

struct PackArgs {
  std::string source;
  std::string output;
  PackOptions options;
  std::string fields;    // --fields jpg,cls
  std::string compress;  // --compress zstd[:LEVEL]
  bool dict = false;     // --dict: train a zstd dictionary
  bool quiet = false;
};

std::atomic<bool> g_cancel{false};
extern "C" void OnSignal(int) { g_cancel.store(true); }

// Pack names the PackOptions field that would change an error or the
// report; say which flag sets it.
constexpr Rewording kPackFlags[] = {
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

int RunPack(PackArgs& args) {
  PackOptions& options = args.options;
  VolumeBuilder::Options& volume = options.volume;
  options.fields = ParseFieldNames(args.fields);
  auto compression = ParseCompression(args.compress, args.dict);
  if (!compression.ok()) return Fail(compression.status().Reworded(kPackFlags));
  volume.compress = std::move(*compression);
  options.cancel = &g_cancel;
  const ProgressLine progress(args.quiet);
  options.on_progress = progress.Callback(FormatPackProgress);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  auto stats = Pack(args.source, args.output, options);
  progress.Clear();
  if (!stats.ok()) return Fail(stats.status().Reworded(kPackFlags));
  for (const std::string& r : stats->removed_temporaries) {
    std::fprintf(stderr, "dlfs: removed stale temporary file %s\n", r.c_str());
  }
  const std::string report = FormatPackReport(*stats, args.source, args.output, volume);
  std::fputs(Reworded(report, kPackFlags).c_str(), stdout);
  return kExitOk;
}

}  // namespace

void AddPack(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<PackArgs>();
  auto* p = app.add_subcommand(
      "pack",
      "Pack a data set (ImageFolder tree, IDX files, tar shards, LMDB database) into a volume,\n"
      "or a token corpus (Megatron-LM indexed dataset, .npy or flat token files) into a token\n"
      "volume");
  p->add_option("source", args->source,
                "Data set to pack: a directory, a tar shard, an LMDB (its directory or\n"
                "data.mdb), a Megatron-LM dataset (its prefix dir/name of name.bin and\n"
                "name.idx, or either file), or a file of token ids (.npy, or flat binary with\n"
                "--from tokens --token-dtype)")
      ->required();
  p->add_option("-o,--output", args->output, "Volume file to create")->required();
  AddEnumOption(p, "--from", &args->options.from, kSourceKindNames, "Importer");
  AddDefaulted(p, "--align", args->options.volume.align,
               "Start every sample at a multiple of this many bytes (power of two, <= 1 MiB)");
  p->add_flag("-f,--force", args->options.volume.overwrite, "Replace the output if it exists");
  AddEnumOption(p, "--layout", &args->options.volume.layout, kDirectoryLayoutNames,
                "Directory layout (docs/format.md): compact (format v3: 6-10 B per sample,\n"
                "used in place, indices in the order packed), tree (v1/v2: 32 B per sample,\n"
                "read whole at open; needed for fields, --compress and image preparation),\n"
                "auto (compact unless the source or options need tree)");
  p->add_flag("--skip-unreadable", args->options.skip_unreadable,
              "Skip (and count) source files that cannot be read instead of stopping");
  AddParsed(p, "--class-names", &args->options.class_names, ParseClassNames,
            "Names of labels 0, 1, ...: \"a,b,c\" or @FILE with one name per line. An\n"
            "ImageFolder tree's classes are its directories: one name per directory, in\n"
            "sorted order, renames them");
  p->add_flag("--all-files", args->options.all_files,
              "imagefolder: pack every regular file (files at the root too), not only the\n"
              "images torchvision's ImageFolder would load");
  p->add_flag("--skip-hidden", args->options.skip_hidden,
              "imagefolder: leave out hidden files and directories (names starting with '.',\n"
              "e.g. .ipynb_checkpoints), which torchvision's ImageFolder reads: the labels\n"
              "then differ from torchvision's where a hidden directory is at the top");
  p->add_flag("--datum-payload", args->options.lmdb_payload_only,
              "lmdb: store only each Caffe Datum's data (e.g. the JPEG), not the whole record");
  // Token corpora: a token volume (docs/format.md §10.11), one document per
  // Megatron sequence or per cut of a token file.
  p->add_option("--token-dtype", args->options.token_dtype,
                "megatron, tokens: store token ids as uint16 or uint32. By default uint16 when\n"
                "every id fits (known from a uint8/int8/int16/uint16 dtype; int32, int64 and\n"
                "uint32 sources are scanned once for their largest id), else uint32. Required\n"
                "for a flat binary token file, whose dtype it also is")
      ->check(CLI::IsMember({"uint16", "uint32"}));
  p->add_option("--lengths", args->options.lengths,
                "tokens: cut the tokens into documents of these lengths (in tokens): a .npy\n"
                "array or a text file with one per line, summing to the token count");
  p->add_option_function<uint64_t>(
      "--eod", [args](const uint64_t& id) { args->options.eod = id; },
      "tokens: cut the tokens after each end-of-document token ID (kept at the end of its\n"
      "document); tokens after the last one are the last document");
  p->add_option("--targets", args->options.volume.targets,
                "Spread the samples over N target files (1..8), e.g. on N devices. Target 0 is\n"
                "the -o file and holds the directory; targets 1..N-1 are OUT.t1 .. OUT.t<N-1>\n"
                "unless named with --target-path. Each sample goes to the target holding the\n"
                "fewest bytes so far")
      ->check(CLI::Range(1, 8));
  p->add_option("--target-path", args->options.volume.target_paths,
                "Path of the next target (repeat: target 1, target 2, ...); implies --targets.\n"
                "Stored relative to OUT's directory when inside it, else absolute")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  p->add_option("--fields", args->fields,
                "tar: keep only these fields of each key, e.g. jpg,cls (labels still come from\n"
                "the .cls members)");
  p->add_option("--compress", args->compress,
                "zstd[:LEVEL]: compress each field with zstd (default level 3), keeping it raw\n"
                "when that saves less than 3 %");
  p->add_flag("--dict", args->dict,
              "With --compress: train a zstd dictionary (up to 110 KiB) on the first 8 MiB\n"
              "or 10000 fields, store it in the volume and compress every field with it.\n"
              "For many small, similar fields (records, token arrays, raw pixels). Fails on\n"
              "too little data to train on");
  // Image preparation (dlfs/image_prep.h), FFCV-style.
  ImagePrepOptions& images = args->options.volume.images;
  p->add_option("--max-side", images.max_side,
                "Resize images whose longer side exceeds N pixels so that it is N (the shorter\n"
                "side in proportion, torchvision's geometry and PIL's pixels; never enlarged)")
      ->check(CLI::Range(1u, 1u << 20));
  AddEnumOption(p, "--resize-filter", &images.filter, kResizeFilterNames,
                "PIL filter for --max-side (antialiased)");
  p->add_option("--jpeg-quality", images.jpeg_quality,
                "Re-encode JPEGs at quality Q (1..100), keeping an original that needs no resize\n"
                "when re-encoding would not make it smaller; encoded JPEGs use 90 without it")
      ->check(CLI::Range(1u, 100u));
  p->add_flag("--always-reencode", images.always_reencode,
              "Re-encode every image, even one that needs no resize, and keep the result even\n"
              "when it is larger than the original");
  AddEnumOption(p, "--image-format", &images.mode, kImageStoreModeNames,
                "How images are stored: keep (their own format), jpeg, raw (decoded uint8 HWC\n"
                "pixels: no decoding when read), smart (raw up to --smart-threshold bytes of\n"
                "pixels, JPEG above), proportion (JPEG with probability --jpeg-probability)");
  AddDefaulted(p, "--smart-threshold", images.smart_threshold,
               "--image-format smart: the largest image stored raw, in bytes of pixels");
  AddDefaulted(p, "--jpeg-probability", images.jpeg_probability,
               "--image-format proportion: the share of images stored as JPEG");
  AddDefaulted(p, "--image-seed", images.seed,
               "--image-format proportion: the seed of which images are JPEG");
  AddEnumOption(p, "--image-color", &images.color, kColorModeNames,
                "Channels of decoded images: rgb (PIL's convert(\"RGB\")), gray, or auto (1 for\n"
                "gray sources, 3 for the others)");
  p->add_option("--prepare-threads", images.threads,
                "Threads preparing images (default: one per core)");
  p->add_flag("-q,--quiet", args->quiet, "No progress output");
  p->callback([args, exit_code] { *exit_code = RunPack(*args); });
}

}  // namespace dlfs::cli
