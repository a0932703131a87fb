// The verbs that read one volume: info, ls, cat, verify, epoch, mount; and
// repair, which rewrites a damaged superblock from its twin.
#include <csignal>
#include <cstdio>
#include <optional>

#include "cli.h"
#include "dlfs/decode.h"
#include "dlfs/file_view.h"
#include "dlfs/mount.h"
#include "dlfs/sample_image.h"
#include "dlfs/sampler.h"
#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs_tools/decode_option_table.h"
#ifdef DLFS_HAVE_MPI
#include "dlfs/distributed.h"
#endif

namespace dlfs::cli {

namespace {

struct CatArgs {
  VolumeArgs volume;
  std::string path;
  std::optional<uint64_t> index;
  std::optional<std::string> field;  // --field json: one field, decoded
  bool verify = true;
  std::string output;  // -o FILE instead of stdout
  // --decode: what the decode pipeline makes of the sample (a PNG when the
  // output ends in .png, else raw HWC bytes). With --size (`transform`), the
  // transforms of the sample in `epoch`, as 8-bit HWC pixels.
  bool decode = false;
  bool transform = false;
  uint64_t epoch = 0;
  ImageOptions image;
};

// Volume::Read refuses a volume of several fields; say how cat names one.
constexpr Rewording kCatFlags[] = {
    {"or read one field by name", "or write one field with --field NAME"}};

int CatDecoded(const CatArgs& args, const Volume& volume, uint64_t index) {
  const std::optional<uint64_t> epoch =
      args.transform ? std::optional<uint64_t>(args.epoch) : std::nullopt;
  auto image = DecodeSample(volume, index, args.image, epoch, args.verify);
  if (!image.ok()) return Fail(image.status());
  if (!args.output.ends_with(".png")) {
    return WriteOutput(args.output, std::as_bytes(std::span(image->pixels)));
  }
  auto png = EncodePng(*image);
  return png.ok() ? WriteOutput(args.output, *png) : Fail(png.status());
}

// A file of the mount's view (dlfs/file_view.h) that is not a sample's
// path: KEY.FIELD, or NAME.ppm for raw pixels; its bytes as the mount
// serves them.
int CatViewFile(const CatArgs& args, const Volume& volume, const ViewFile& file) {
  const SampleDirectory& d = volume.directory();
  if (args.decode) return CatDecoded(args, volume, file.sample);
  const std::string_view field = d.field_name(file.info.field);
  auto bytes = d.has_fields() ? volume.Read(file.sample, field, args.verify)
                              : volume.Read(file.sample, args.verify);
  if (!bytes.ok()) return Fail(bytes.status());
  if (!file.ppm) return WriteOutput(args.output, *bytes);
  auto ppm = RawImageToPpm(*bytes, volume.FieldContext(file.sample, file.info.field));
  return ppm.ok() ? WriteOutput(args.output, *ppm) : Fail(ppm.status());
}

int RunCat(const CatArgs& args) {
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  const SampleDirectory& d = (*vol)->directory();
  auto index = args.index ? Result<uint64_t>(*args.index) : d.Lookup(args.path);
  if (!index.ok() && !args.index && !args.field) {
    // The names `dlfs mount` shows: KEY.FIELD, NAME.ppm.
    if (std::optional<ViewFile> file = ResolveViewPath(d, args.path)) {
      return CatViewFile(args, **vol, *file);
    }
  }
  if (!index.ok()) return Fail(index.status().WithContext(args.volume.path));
  if (args.decode) return CatDecoded(args, **vol, *index);
  if (args.field) {
    auto field = (*vol)->Read(*index, std::string_view(*args.field), args.verify);
    return field.ok() ? WriteOutput(args.output, *field) : Fail(field.status());
  }
  auto bytes = (*vol)->Read(*index, args.verify);
  if (bytes.ok() && *index < d.size() && !d.has_field_records() && IsRawImageField(d, *index, 0)) {
    // Its name says JPEG or PNG; its bytes are not (--image-format raw).
    std::fprintf(stderr,
                 "dlfs: note: %s holds raw pixels (docs/format.md 4.9.3), not the image its "
                 "name says: `dlfs cat %s %s.ppm` writes them as a PPM, --decode -o x.png as "
                 "a PNG\n",
                 d.Path(*index).c_str(), args.volume.path.c_str(), d.Path(*index).c_str());
  }
  return bytes.ok() ? WriteOutput(args.output, *bytes) : Fail(bytes.status().Reworded(kCatFlags));
}

struct VerifyArgs {
  VolumeArgs volume;
  bool quiet = false;
  bool json = false;
};

int RunVerify(const VerifyArgs& args) {
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  const ProgressLine progress(args.quiet);
  VerifyOptions options;
  options.on_progress = progress.Callback(FormatVerifyProgress);
  options.on_bad_sample = [&progress](uint64_t, const Status& problem) {
    progress.Clear();
    Fail(problem);
  };
  VerifyReport report;
  Status st = VerifyVolume(**vol, options, &report);
  progress.Clear();
  if (!st.ok()) return Fail(st);
  if (!report.backup_superblock.ok()) {
    const Status& copy = report.backup_superblock;
    Fail(Status(copy.code(),
                copy.message() + " (`dlfs repair` on that file rewrites the copy from the primary)",
                copy.sys_errno()));
  }
  if (!report.directory.ok()) Fail(report.directory);
  if (!report.tokens.ok()) Fail(report.tokens);
  Print(FormatVerifyReport(args.volume.path, report, FormatOf(args.json)));
  return report.bad_samples == 0 && report.backup_superblock.ok() && report.directory.ok() &&
                 report.tokens.ok()
             ? kExitOk
             : kExitDamaged;
}

struct EpochArgs {
  VolumeArgs volume;
  SamplerOptions sampler;
  uint64_t epoch = 0;
  uint64_t start = 0;             // the first position of the rank's order printed
  uint64_t count = ~uint64_t{0};  // how many (all of them)
};

// Indices are computed and printed a page at a time: nothing of the
// epoch's size is held, and the first lines come at once.
constexpr uint64_t kEpochPage = uint64_t{1} << 20;

// Under mpirun: rank 0 prints "rank<TAB>index" lines, rank by rank, a page
// of each rank's order at a time.
int RunEpochMpi(const EpochArgs& args) {
#ifdef DLFS_HAVE_MPI
  return RunWithMpi([&](int rank, int world) {
    auto volume = OpenShared(MPI_COMM_WORLD, args.volume.path, args.volume.open);
    if (!volume.ok()) return FailOnRank0(rank, volume.status());
    uint64_t at = args.start;
    uint64_t left = args.count;
    while (true) {
      auto page = GatherEpochIndices(MPI_COMM_WORLD, **volume, args.sampler, args.epoch, at,
                                     std::min(left, kEpochPage));
      if (!page.ok()) return FailOnRank0(rank, page.status());
      if (rank == 0) Print(FormatEpochIndices(*page, world));
      // Every rank's page is as long (rank 0 holds world of them).
      uint64_t got = page->size() / static_cast<uint64_t>(world);
      MPI_Bcast(&got, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
      if (got < std::min(left, kEpochPage)) break;
      at += got;
      left -= got;
      if (left == 0) break;
    }
    return kExitOk;
  });
#else
  (void)args;
  return kExitError;
#endif
}

int RunEpoch(const EpochArgs& args) {
  if (LaunchedByMpirun()) return RunEpochMpi(args);
  auto vol = OpenVolume(args.volume);
  if (!vol.ok()) return Fail(vol.status());
  auto sampler = Sampler::Create((*vol)->size(), args.sampler);
  if (!sampler.ok()) return Fail(sampler.status());
  const RankOrder order = sampler->Ranked(args.epoch);
  const uint64_t first = std::min(args.start, order.size());
  const uint64_t end = first + std::min(args.count, order.size() - first);
  std::vector<uint64_t> page;
  for (uint64_t k = first; k < end; k += page.size()) {
    page.resize(std::min(kEpochPage, end - k));
    order.Fill(k, page.size(), page.data());
    Print(FormatEpochIndices(page, 0));
  }
  return kExitOk;
}

}  // namespace

void AddInfo(CLI::App& app, int* exit_code) {
  struct Args {
    VolumeArgs volume;
    bool json = false;
  };
  auto args = std::make_shared<Args>();
  auto* i = app.add_subcommand("info", "Show a volume's summary: samples, bytes, classes, format");
  AddVolumeArgs(i, &args->volume);
  i->add_flag("--json", args->json, "One JSON object instead of text");
  i->callback([args, exit_code] {
    auto vol = OpenVolume(args->volume);
    if (!vol.ok()) return void(*exit_code = Fail(vol.status()));
    Print(FormatVolumeSummary(SummarizeVolume(**vol), FormatOf(args->json)));
  });
}

void AddLs(CLI::App& app, int* exit_code) {
  struct Args {
    VolumeArgs volume;
    std::string dir;
    bool json = false;
    bool recursive = false;
  };
  auto args = std::make_shared<Args>();
  auto* l = app.add_subcommand("ls", "List a directory of a volume");
  AddVolumeArgs(l, &args->volume);
  l->add_option("dir", args->dir, "Directory inside the volume (default: the root)");
  l->add_flag("-r,--recursive", args->recursive, "List every sample below DIR instead");
  l->add_flag("--json", args->json,
              "JSON lines: samples as {path,index,size,label,class} (class when labelled;\n"
              "format v2 adds fields: [{name,size,stored,codec}]), directories as\n"
              "{path,type,samples,subdirs}");
  l->callback([args, exit_code] {
    auto vol = OpenVolume(args->volume);
    if (!vol.ok()) return void(*exit_code = Fail(vol.status()));
    const Status st =
        ListPath((*vol)->directory(), args->dir, args->recursive, FormatOf(args->json), Print);
    if (!st.ok()) *exit_code = Fail(st.WithContext(args->volume.path));
  });
}

void AddCat(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<CatArgs>();
  auto* c = app.add_subcommand(
      "cat", "Write one sample's exact bytes to stdout (or -o FILE), or with --decode its pixels");
  AddVolumeArgs(c, &args->volume);
  auto* path_opt = c->add_option(
      "path", args->path,
      "Sample path inside the volume, or a file as `dlfs mount` names it (KEY.FIELD;\n"
      "NAME.ppm: raw pixels as a PPM)");
  auto* index_opt = c->add_option("--index", args->index, "Sample index instead of a path");
  path_opt->excludes(index_opt);
  AddOffFlag(c, "--no-verify", &args->verify, "Do not check the sample's checksum");
  c->add_option("--field", args->field,
                "Write this field of the sample (e.g. json), decompressed; a sample with\n"
                "several fields needs it");
  c->add_option("-o,--output", args->output, "Write to this file instead of stdout");
  auto* decode = c->add_flag(
      "--decode", args->decode,
      "Decode the sample (JPEG, PNG or --raw-shape pixels) and write its pixels: a PNG\n"
      "when -o ends in .png, else raw HWC bytes");
  auto* size = c->add_option("--size", args->image.transform.size,
                             "Apply the training transforms (output SIZE x SIZE) as the\n"
                             "pipeline does for this sample in --epoch with --seed");
  const size_t decode_options = c->get_options().size() - 1;  // --size on
  AddDefaulted(c, "--epoch", args->epoch, "The epoch whose random choices apply")->needs(size);
  AddDefaulted(c, "--seed", args->image.transform.seed, "The seed of the random transforms")
      ->needs(size);
  AddOptions(c, options::kDecodeOptions, &args->image);
  NeedAllSince(c, decode_options, decode);
  c->callback([args, size, exit_code] {
    if (args->path.empty() && !args->index) throw CLI::ValidationError("give a PATH or --index N");
    args->transform = size->count() > 0;
    *exit_code = RunCat(*args);
  });
}

void AddVerify(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<VerifyArgs>();
  auto* v = app.add_subcommand(
      "verify", "Read every sample and check every checksum; exit 1 naming each bad sample");
  AddVolumeArgs(v, &args->volume);
  v->add_flag("-q,--quiet", args->quiet, "No progress output");
  v->add_flag("--json", args->json,
              "One JSON object: counts and bad_samples, the records [{volume, index, path, "
              "reason}] a loader's quarantine= takes (Python: dlfs.Loader(..., quarantine=...))");
  v->callback([args, exit_code] { *exit_code = RunVerify(*args); });
}

void AddRepair(CLI::App& app, int* exit_code) {
  struct Args {
    std::string path;
    bool dry_run = false;
  };
  auto args = std::make_shared<Args>();
  auto* r = app.add_subcommand(
      "repair",
      "Restore a volume file's damaged superblock from its intact twin (every target file\n"
      "holds its superblock at its start and again in its last 4 KiB): one 4 KiB write,\n"
      "nothing else is touched. Run it on the file the error names.");
  r->add_option("volume", args->path, "The volume (or target) file")->required();
  r->add_flag("-n,--dry-run", args->dry_run, "Say what would be rewritten; write nothing");
  r->callback([args, exit_code] {
    auto done = RepairSuperblock(args->path, args->dry_run);
    if (!done.ok()) return void(*exit_code = Fail(done.status()));
    Print(done->what + "\n");
    *exit_code = kExitOk;
  });
}

void AddEpoch(CLI::App& app, int* exit_code) {
  auto args = std::make_shared<EpochArgs>();
  // A batch only matters here with --drop-last; by default every sample is printed.
  args->sampler.batch_size = 1;
  auto* e = app.add_subcommand(
      "epoch",
      "Print the sample indices one rank reads in one epoch, one per line, in order\n"
      "(--start and --count print a part of them; each is computed from its position).\n"
      "Under mpirun: rank and world come from MPI, and rank 0 prints RANK<TAB>INDEX lines\n"
      "for every rank, rank by rank a page of 1,048,576 positions at a time.");
  AddVolumeArgs(e, &args->volume);
  SamplerOptions& s = args->sampler;
  AddDefaulted(e, "--seed", s.seed, "Shuffle seed");
  AddDefaulted(e, "--epoch", args->epoch, "Epoch number");
  auto* rank = AddDefaulted(e, "--rank", s.rank, "This rank (not under mpirun)");
  auto* world = AddDefaulted(e, "--world", s.world_size, "Number of ranks (not under mpirun)");
  AddDefaulted(e, "--batch", s.batch_size, "Batch size (matters with --drop-last)");
  e->add_flag("--drop-last", s.drop_last,
              "Drop the tail instead of padding by wrapping around (as DistributedSampler)");
  AddOffFlag(e, "--no-shuffle", &s.shuffle, "Volume order instead of a permutation");
  AddDefaulted(e, "--start", args->start, "The first position of the rank's order to print");
  e->add_option("--count", args->count, "How many positions to print (default: to the end)");
  e->callback([args, rank, world, exit_code] {
    if (LaunchedByMpirun() && rank->count() + world->count() > 0) {
      throw CLI::ValidationError("--rank and --world come from mpirun; leave them out");
    }
    *exit_code = RunEpoch(*args);
  });
}

void AddMount(CLI::App& app, int* exit_code) {
  struct Args {
    VolumeArgs volume;
    std::string mountpoint;
    MountOptions options;
  };
  auto args = std::make_shared<Args>();
  auto* m =
      app.add_subcommand("mount",
                         "Mount a volume read-only with FUSE: its tree as directories and files,\n"
                         "a sample's fields as KEY.FIELD files (as in the tar it was packed\n"
                         "from), compressed fields decompressed.\n"
                         "Unmount with `fusermount3 -u MOUNTPOINT` (or Ctrl-C / SIGTERM with -f).");
  AddVolumeArgs(m, &args->volume);
  m->add_option("mountpoint", args->mountpoint, "An existing empty directory")->required();
  m->add_flag("-f,--foreground", args->options.foreground,
              "Stay in the foreground until unmounted");
  m->add_flag("--debug", args->options.debug, "libfuse debug output (implies -f)");
  m->add_flag("--allow-other", args->options.allow_other,
              "Let other users read the mount (needs user_allow_other in /etc/fuse.conf)");
  m->callback([args, exit_code] {
    if (!kMountSupported) return void(*exit_code = Fail(MountVolume(nullptr, "", {})));
    auto vol = OpenVolume(args->volume);
    if (!vol.ok()) return void(*exit_code = Fail(vol.status()));
    // libfuse handles SIGINT/SIGTERM itself (unmount and return).
    std::signal(SIGINT, SIG_DFL);
    std::signal(SIGTERM, SIG_DFL);
    const Status st = MountVolume(*vol, args->mountpoint, args->options);
    *exit_code = st.ok() ? kExitOk : Fail(st);
  });
}

}  // namespace dlfs::cli
