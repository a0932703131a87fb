// dlfs: command-line front end. It parses options into the library's option
// structs and dispatches; the work is done by the library (see commands.cc).
#include <CLI/CLI.hpp>

#include <cstdio>

#include "commands.h"
#include "dlfs/decode.h"
#include "dlfs/enum_names.h"
#include "dlfs/version.h"

namespace {

using namespace dlfs;
using namespace dlfs::cli;

// The volume argument and --target-map, as every verb that opens a volume has them.
void AddVolumeArgs(CLI::App* verb, VolumeArgs* args) {
  verb->add_option("volume", args->path, "Volume file (its target 0)")->required();
  verb->add_option("--target-map", args->target_map,
                   "Where to find targets other than 0, e.g. 1=/dev/nvme1n1,2=/data/v.t2\n"
                   "or 1=nbd://storage1/nvme0n1 (instead of the paths recorded in the volume)");
}

// A flag that sets *value to false (e.g. --no-verify for a default-on check).
void AddOffFlag(CLI::App* verb, const std::string& name, bool* value, const std::string& help) {
  verb->add_flag_callback(
      name, [value] { *value = false; }, help);
}

// An option taking one of an enum's names (see dlfs/enum_names.h).
template <typename E, size_t N>
CLI::Option* AddEnumOption(CLI::App* verb, const std::string& name, E* value,
                           const EnumName<E> (&table)[N], const std::string& help) {
  return verb
      ->add_option_function<std::string>(
          name,
          [value, &table](const std::string& text) {
            Result<E> parsed = ParseEnum(table, text, "value");
            if (!parsed.ok()) throw CLI::ValidationError(parsed.status().message());
            *value = *parsed;
          },
          help)
      ->default_str(std::string(NameOf(table, *value)))
      ->check(CLI::IsMember(NamesOf(table)));
}

// The options of the batch loader that `dlfs bench` exposes.
void AddLoaderOptions(CLI::App* verb, LoaderOptions* o) {
  AddEnumOption(verb, "--engine", &o->engine.kind, kEngineKindNames, "I/O engine");
  verb->add_option("--queue-depth", o->engine.queue_depth, "Reads in flight per I/O thread")
      ->capture_default_str();
  verb->add_option("--batch", o->sampler.batch_size, "Samples per batch")->capture_default_str();
  verb->add_option("--io-threads", o->io_threads, "I/O threads (one ring each)")
      ->capture_default_str();
  verb->add_option("--prefetch", o->prefetch_batches, "Batches read ahead")->capture_default_str();
  verb->add_option("--seed", o->sampler.seed, "Shuffle seed")->capture_default_str();
  verb->add_option("--coalesce-gap", o->plan.coalesce_gap, "Merge reads whose gap is at most this")
      ->capture_default_str();
  AddOffFlag(verb, "--no-coalesce", &o->plan.coalesce, "One read per sample");
  AddOffFlag(verb, "--no-verify", &o->verify_checksums, "Skip CRC32C checks of samples");
  AddOffFlag(verb, "--buffered", &o->engine.direct_io, "Read through the page cache (no O_DIRECT)");
  verb->add_flag("--sqpoll", o->engine.sqpoll,
                 "io_uring SQPOLL (a kernel thread polls; uses a core)");
  verb->add_option("--nbd-connections", o->engine.nbd.connections,
                   "Connections per NBD target and I/O thread (if the server allows multi-conn)")
      ->capture_default_str();
  verb->add_option("--nbd-timeout", o->engine.nbd.timeout_seconds,
                   "Seconds before an unanswered NBD read fails (its connection is reopened)")
      ->capture_default_str();
  verb->add_option("--nbd-reconnects", o->engine.nbd.reconnects,
                   "Attempts to reconnect a lost NBD connection before its reads fail")
      ->capture_default_str();
  verb->add_option_function<std::string>(
          "--cache-budget",
          [o](const std::string& text) {
            const Result<uint64_t> budget = ParseByteBudget(text);
            if (!budget.ok())
              throw CLI::ValidationError("--cache-budget: " + budget.status().message());
            o->cache_budget = *budget;
          },
          "Node cache: keep samples read in memory shared by the node's processes, up to\n"
          "this many bytes (auto: $DLFS_CACHE_BUDGET, else a quarter of what the job may\n"
          "use: MemAvailable and its memory cgroup's limit; 0: off; suffixes K, M, G, T)")
      ->default_str("auto");
  verb->add_option("--fields", o->fields,
                   "Read these fields of each sample, e.g. jpg,cls (format v2; needed when\n"
                   "samples have several fields): raw fields are handed out\n"
                   "zero-copy, zstd ones are decompressed by the loader, so samples/s and the\n"
                   "payload MB/s (decoded bytes) include decompression. With --decode: the\n"
                   "image field only")
      ->delimiter(',');
}

// --raw-shape HxW or HxWxC.
void AddRawShapeOption(CLI::App* verb, RawShape* raw) {
  verb->add_option_function<std::string>(
      "--raw-shape",
      [raw](const std::string& text) {
        unsigned h = 0, w = 0, c = 1;
        char tail = 0;
        const int n = std::sscanf(text.c_str(), "%ux%ux%u%c", &h, &w, &c, &tail);
        if ((n != 2 && n != 3) || h == 0 || w == 0) {
          throw CLI::ValidationError("--raw-shape takes HxW or HxWxC, e.g. 28x28, not " + text);
        }
        *raw = {h, w, c};
      },
      "Samples that are neither JPEG nor PNG are raw pixels of this shape (HxW or HxWxC)");
}

// Decoding options shared by `cat --decode` and `bench --decode`.
void AddDecodeOptions(CLI::App* verb, ImageOptions* o) {
  AddEnumOption(verb, "--crop", &o->transform.crop, kCropModeNames,
                "With --size: Resize+CenterCrop, or RandomResizedCrop");
  verb->add_option("--resize", o->transform.resize,
                   "--crop center: resize the shorter side to this first (default: --size)");
  verb->add_flag("--flip", o->transform.flip, "Random horizontal flip (p = 0.5)");
  AddEnumOption(verb, "--color", &o->decode.color, kColorModeNames,
                "Channels: the image's own, or forced");
  AddRawShapeOption(verb, &o->decode.raw);
  verb->add_option("--max-pixels", o->decode.max_pixels,
                   "Refuse images of more pixels (from their header)")
      ->capture_default_str();
  AddOffFlag(verb, "--no-dct-scaling", &o->decode.dct_scaling,
             "Always decode JPEGs at full scale (no 1/2, 1/4, 1/8 DCT scaling)");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "dlfs: pack many small training samples into one volume and read them back fast.\n"
      "Exit codes: 0 ok, 1 damaged samples found (verify), 2 error or bad input."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dlfs " DLFS_VERSION_STRING);
  int rc = kExitOk;

  PackArgs pack;
  auto* p = app.add_subcommand(
      "pack", "Pack a data set (ImageFolder tree, IDX files, tar shards) into a volume");
  p->add_option("source", pack.source, "Data set to pack: a directory or a tar shard")->required();
  p->add_option("-o,--output", pack.output, "Volume file to create")->required();
  AddEnumOption(p, "--from", &pack.options.from, kSourceKindNames, "Importer");
  p->add_option("--align", pack.options.volume.align,
                "Start every sample at a multiple of this many bytes (power of two, <= 1 MiB)")
      ->capture_default_str();
  p->add_flag("-f,--force", pack.options.volume.overwrite, "Replace the output if it exists");
  p->add_flag("--skip-unreadable", pack.options.skip_unreadable,
              "Skip (and count) source files that cannot be read instead of stopping");
  p->add_option("--class-names", pack.class_names,
                "Names of labels 0, 1, ...: \"a,b,c\" or @FILE with one name per line");
  p->add_flag("--all-files", pack.options.all_files,
              "imagefolder: pack every regular file (hidden ones and files at the root too),\n"
              "not only the images torchvision's ImageFolder would load");
  p->add_flag("--datum-payload", pack.options.lmdb_payload_only,
              "lmdb: store only each Caffe Datum's data (e.g. the JPEG), not the whole record");
  p->add_option("--targets", pack.targets,
                "Spread the samples over N target files (1..8), e.g. on N devices. Target 0 is\n"
                "the -o file and holds the directory; targets 1..N-1 are OUT.t1 .. OUT.t<N-1>\n"
                "unless named with --target-path. Each sample goes to the target holding the\n"
                "fewest bytes so far")
      ->check(CLI::Range(1, 8));
  p->add_option("--target-path", pack.options.volume.target_paths,
                "Path of the next target (repeat: target 1, target 2, ...); implies --targets.\n"
                "Stored relative to OUT's directory when inside it, else absolute")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  p->add_option("--fields", pack.fields,
                "tar: keep only these fields of each key, e.g. jpg,cls (labels still come from\n"
                "the .cls members)");
  p->add_option("--compress", pack.compress,
                "zstd[:LEVEL]: compress each field with zstd (default level 3), keeping it raw\n"
                "when that saves less than 3 %");
  p->add_flag("--dict", pack.dict,
              "With --compress: train a zstd dictionary (up to 110 KiB) on the first 8 MiB\n"
              "or 10000 fields, store it in the volume and compress every field with it.\n"
              "For many small, similar fields (records, token arrays, raw pixels). Fails on\n"
              "too little data to train on");
  p->add_flag("-q,--quiet", pack.quiet, "No progress output");
  p->callback([&] { rc = RunPack(pack); });

  InfoArgs info;
  auto* i = app.add_subcommand("info", "Show a volume's summary: samples, bytes, classes, format");
  AddVolumeArgs(i, &info.volume);
  i->add_flag("--json", info.json, "One JSON object instead of text");
  i->callback([&] { rc = RunInfo(info); });

  LsArgs ls;
  auto* l = app.add_subcommand("ls", "List a directory of a volume");
  AddVolumeArgs(l, &ls.volume);
  l->add_option("dir", ls.dir, "Directory inside the volume (default: the root)");
  l->add_flag("-r,--recursive", ls.recursive, "List every sample below DIR instead");
  l->add_flag("--json", ls.json,
              "JSON lines: samples as {path,index,size,label,class}, directories as {path,type}");
  l->callback([&] { rc = RunLs(ls); });

  CatArgs cat;
  auto* c = app.add_subcommand(
      "cat", "Write one sample's exact bytes to stdout (or -o FILE), or with --decode its pixels");
  AddVolumeArgs(c, &cat.volume);
  auto* path_opt = c->add_option("path", cat.path, "Sample path inside the volume");
  auto* index_opt = c->add_option("--index", cat.index, "Sample index instead of a path");
  path_opt->excludes(index_opt);
  AddOffFlag(c, "--no-verify", &cat.verify, "Do not check the sample's checksum");
  c->add_option("--field", cat.field,
                "Write this field of the sample (e.g. json), decompressed; a sample with\n"
                "several fields needs it");
  c->add_option("-o,--output", cat.output, "Write to this file instead of stdout");
  c->add_flag("--decode", cat.decode,
              "Decode the sample (JPEG, PNG or --raw-shape pixels) and write its pixels: a PNG\n"
              "when -o ends in .png, else raw HWC bytes");
  auto* cat_size =
      c->add_option("--size", cat.image.transform.size,
                    "--decode: apply the training transforms (output SIZE x SIZE) as the\n"
                    "pipeline does for this sample in --epoch with --seed");
  c->add_option("--epoch", cat.epoch, "--decode --size: the epoch whose random choices apply")
      ->capture_default_str();
  c->add_option("--seed", cat.image.transform.seed, "--decode --size: the seed")
      ->capture_default_str();
  AddDecodeOptions(c, &cat.image);
  c->callback([&] {
    if (cat.path.empty() && !cat.index) throw CLI::ValidationError("give a PATH or --index N");
    cat.transform = cat_size->count() > 0;
    if (cat.transform && !cat.decode) throw CLI::ValidationError("--size needs --decode");
    rc = RunCat(cat);
  });

  VerifyArgs verify;
  auto* v = app.add_subcommand(
      "verify", "Read every sample and check every checksum; exit 1 naming each bad sample");
  AddVolumeArgs(v, &verify.volume);
  v->add_flag("-q,--quiet", verify.quiet, "No progress output");
  v->add_flag("--json", verify.json,
              "One JSON object: counts and bad_samples, the records [{volume, index, path, "
              "reason}] a loader's quarantine= takes (Python: dlfs.Loader(..., quarantine=...))");
  v->callback([&] { rc = RunVerify(verify); });

  EpochArgs epoch;
  // A batch only matters here with --drop-last; by default every sample is printed.
  epoch.sampler.batch_size = 1;
  auto* e = app.add_subcommand(
      "epoch",
      "Print the sample indices one rank reads in one epoch, one per line, in order.\n"
      "Under mpirun: rank and world come from MPI, and rank 0 prints RANK<TAB>INDEX lines\n"
      "for every rank.");
  AddVolumeArgs(e, &epoch.volume);
  e->add_option("--seed", epoch.sampler.seed, "Shuffle seed")->capture_default_str();
  e->add_option("--epoch", epoch.epoch, "Epoch number")->capture_default_str();
  e->add_option("--rank", epoch.sampler.rank, "This rank")->capture_default_str();
  e->add_option("--world", epoch.sampler.world_size, "Number of ranks")->capture_default_str();
  e->add_option("--batch", epoch.sampler.batch_size, "Batch size (matters with --drop-last)")
      ->capture_default_str();
  e->add_flag("--drop-last", epoch.sampler.drop_last,
              "Drop the tail instead of padding by wrapping around (as DistributedSampler)");
  AddOffFlag(e, "--no-shuffle", &epoch.sampler.shuffle, "Volume order instead of a permutation");
  e->callback([&] { rc = RunEpoch(epoch); });

  BenchArgs bench;
  auto* b = app.add_subcommand(
      "bench",
      "Read full shuffled epochs through the batch loader and report throughput.\n"
      "Under mpirun: one job; the volume is opened collectively (one directory copy per\n"
      "node) and rank 0 reports samples/s of all ranks together.");
  AddVolumeArgs(b, &bench.volume);
  b->add_option("more", bench.mixture,
                "Further volumes: read a weighted mixture of all of them (see --weights)");
  b->add_option("--weights", bench.weights,
                "With several volumes: each one's share of an epoch, e.g. 0.7,0.3 (default "
                "equal)")
      ->delimiter(',');
  b->add_option("--epoch-samples", bench.epoch_samples,
                "With several volumes: samples per epoch (default: the most the weights allow "
                "before a volume runs out)");
  b->add_flag("--cycle", bench.cycle,
              "With several volumes: a volume smaller than its share starts over");
  AddLoaderOptions(b, &bench.source.loader);
  b->add_option("--epochs", bench.bench.epochs, "Epochs to read")->capture_default_str();
  b->add_flag("--drop-cache", bench.bench.drop_cache,
              "Drop the page cache before each epoch (root), else fadvise(DONTNEED) the volume");
  b->add_flag("--json", bench.json, "One JSON object instead of text");
  b->add_flag("--shard-local", bench.shard_local,
              "mpirun: each node reads only target (node index mod targets); other samples "
              "come from their node over MPI");
  b->add_option("--window", bench.source.window_batches,
                "mpirun --shard-local: batches per exchange")
      ->capture_default_str();
  b->add_flag("--read-ahead", bench.source.read_ahead,
              "mpirun --shard-local: read the next window on a thread while this one is used");
  b->add_flag("--private-open", bench.private_open,
              "mpirun: every rank reads the directory itself (to compare with the collective "
              "open)");
  ImageOptions& image = bench.decode_stage.image;
  b->add_flag("--decode", bench.decode,
              "Decode and transform every sample on --decode-threads (needs --size); reports\n"
              "images/s and CPU per image");
  auto* bench_size =
      b->add_option("--size", image.transform.size, "--decode: output images are SIZE x SIZE");
  AddDecodeOptions(b, &image);
  AddEnumOption(b, "--dtype", &image.output.dtype, kDTypeNames, "--decode: output element type");
  AddEnumOption(b, "--layout", &image.output.layout, kOutputLayoutNames, "--decode: output layout");
  b->add_option("--mean", image.output.mean, "--decode, float32: per-channel mean (0..1 units)")
      ->delimiter(',');
  b->add_option("--std", image.output.std, "--decode, float32: per-channel std (0..1 units)")
      ->delimiter(',');
  b->add_option("--decode-threads", bench.decode_stage.decode_threads,
                "--decode: decode threads (0: one per core)")
      ->capture_default_str();
  b->add_option("--decode-prefetch", bench.decode_stage.prefetch_batches,
                "--decode: batches queued for decoding")
      ->capture_default_str();
  b->add_flag("--skip-bad", bench.decode_stage.skip_bad_samples,
              "--decode: skip and count undecodable samples instead of failing");
  b->callback([&] {
    if (bench.decode && bench_size->count() == 0) {
      throw CLI::ValidationError("--decode needs --size N");
    }
    if (!bench.decode && bench_size->count() > 0)
      throw CLI::ValidationError("--size needs --decode");
    rc = RunBench(bench);
  });

  LmdbInfoArgs lmdb_info;
  auto* lmdb = app.add_subcommand("lmdb", "Inspect existing LMDB databases (e.g. Caffe's)");
  lmdb->require_subcommand(1);
  auto* li = lmdb->add_subcommand(
      "info", "Parse data.mdb directly: entries, tree depth, pages, record sizes, Datum shape");
  li->add_option("db", lmdb_info.db, "LMDB directory or its data.mdb")->required();
  li->add_flag("--json", lmdb_info.json, "One JSON object instead of text");
  li->callback([&] { rc = RunLmdbInfo(lmdb_info); });

  LmdbReadArgs lmdb_read;
  auto* lr = lmdb->add_subcommand(
      "read",
      "Read an LMDB the way Caffe does, from every MPI rank, with the chosen LMDBIO mode.\n"
      "Run under mpirun, e.g. `mpirun -np 4 dlfs lmdb read DB --mode lmm-dio-prov`.\n"
      "Prints per-rank record counts, a digest of the bytes read (equal across modes),\n"
      "and where the time went. See docs/lmdbio.md.");
  lr->add_option("db", lmdb_read.db, "LMDB directory or its data.mdb")->required();
  LmdbioOptions& reader = lmdb_read.options.reader;
  AddEnumOption(lr, "--mode", &reader.mode, kLmdbioModeNames, "Mode");
  lr->add_option("-b,--batch", reader.batch_size, "Global batch size (a multiple of the ranks)")
      ->capture_default_str();
  lr->add_option("-n,--iters", lmdb_read.options.iterations, "Iterations to read")
      ->capture_default_str();
  lr->add_option("--readers-per-node", reader.readers_per_node,
                 "Readers per node (lmm-dm and later; lmm always has one)")
      ->capture_default_str();
  AddEnumOption(lr, "--engine", &reader.engine, kEngineKindNames,
                "Explicit reads (dio modes); auto picks uring where available");
  AddOffFlag(lr, "--buffered", &reader.direct_io,
             "Explicit reads (dio modes) through the page cache (no O_DIRECT)");
  AddOffFlag(lr, "--no-prefetch", &reader.prefetch, "lmm-dm: no speculative prefetch");
  lr->add_option("--coalesce-bytes", reader.coalesce_bytes,
                 "coal: bytes each reader reads per step (sets iterations per read)")
      ->capture_default_str();
  lr->add_option("--max-coalesce-iters", reader.max_coalesce_iters,
                 "coal: at most this many iterations per read")
      ->capture_default_str();
  lr->add_option("--stagger", reader.stagger_group, "stag: readers that read at the same time")
      ->capture_default_str();
  lr->add_flag("--check", lmdb_read.options.check,
               "Compare every record with the value the parser finds at its index, and count "
               "how often each record was read");
  lr->add_option("--counters", lmdb_read.options.counters_file,
                 "A file of \"name value\" counters (e.g. pfs-emu's MOUNT/.pfs-emu-stats) read "
                 "before and after the iterations; reports how much each grew");
  lr->add_flag("--drop-cache", lmdb_read.drop_cache,
               "Drop the page cache before reading (root; for benchmarks)");
  lr->add_flag("--json", lmdb_read.json, "One JSON object (from rank 0) instead of text");
  lr->callback([&] { rc = RunLmdbRead(lmdb_read); });

  MountArgs mount;
  auto* mnt =
      app.add_subcommand("mount",
                         "Mount a volume read-only with FUSE: its tree as directories and files,\n"
                         "a sample's fields as KEY.FIELD files (as in the tar it was packed\n"
                         "from), compressed fields decompressed.\n"
                         "Unmount with `fusermount3 -u MOUNTPOINT` (or Ctrl-C / SIGTERM with -f).");
  AddVolumeArgs(mnt, &mount.volume);
  mnt->add_option("mountpoint", mount.mountpoint, "An existing empty directory")->required();
  mnt->add_flag("-f,--foreground", mount.options.foreground,
                "Stay in the foreground until unmounted");
  mnt->add_flag("--debug", mount.options.debug, "libfuse debug output (implies -f)");
  mnt->add_flag("--allow-other", mount.options.allow_other,
                "Let other users read the mount (needs user_allow_other in /etc/fuse.conf)");
  mnt->callback([&] { rc = RunMount(mount); });

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    app.exit(e);
    return kExitError;
  }
  return rc;
}
