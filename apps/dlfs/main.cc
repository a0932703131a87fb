// dlfs: command-line front end. Each verb parses its options into the
// library's option structs and calls the library (cli.h); this file holds
// what the verbs share.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "cli.h"
#include "dlfs/launch.h"
#include "dlfs/version.h"
#ifdef DLFS_HAVE_MPI
#include "dlfs/mpi.h"
#endif

namespace dlfs::cli {

int Fail(const Status& st) {
  std::fprintf(stderr, "dlfs: %s\n", st.Reworded(kLoaderFlags).message().c_str());
  return kExitError;
}

void AddVolumeArgs(CLI::App* verb, VolumeArgs* args) {
  verb->add_option("volume", args->path, "Volume file (its target 0)")->required();
  AddParsed(verb, "--target-map", &args->open.target_map, ParseTargetMap,
            "Where to find targets other than 0, e.g. 1=/dev/nvme1n1,2=/data/v.t2\n"
            "or 1=nbd://storage1/nvme0n1 (instead of the paths recorded in the volume)");
}

void AddOffFlag(CLI::App* verb, const std::string& name, bool* value, const std::string& help) {
  verb->add_flag_callback(
      name, [value] { *value = false; }, help);
}

void Print(const std::string& text) { std::fwrite(text.data(), 1, text.size(), stdout); }

ProgressLine::ProgressLine(bool quiet) : shown_(!quiet && ::isatty(STDERR_FILENO)) {}

void ProgressLine::Clear() const {
  if (shown_) std::fputs("\r\033[K", stderr);
}

int WriteOutput(const std::string& path, std::span<const std::byte> data) {
  const bool to_stdout = path.empty() || path == "-";
  std::FILE* out = to_stdout ? stdout : std::fopen(path.c_str(), "wbe");
  if (out == nullptr) return Fail(Status::FromErrno(errno, path));
  int error = std::fwrite(data.data(), 1, data.size(), out) == data.size() ? 0 : errno;
  // The file is closed on every path; a failed flush or close loses written data.
  if ((to_stdout ? std::fflush(out) : std::fclose(out)) != 0 && error == 0) error = errno;
  return error == 0 ? kExitOk : Fail(Status::FromErrno(error, to_stdout ? "stdout" : path));
}

bool LaunchedByMpirun() {
#ifdef DLFS_HAVE_MPI
  const Result<LaunchInfo> launch = DetectLaunch();  // mpirun, or srun with PMIx
  return launch.ok() && launch->mpi_launch;
#else
  return false;
#endif
}

int RunWithMpi(const std::function<int(int rank, int world)>& body) {
#ifdef DLFS_HAVE_MPI
  return RunMpiProgram(body);
#else
  (void)body;
  return Fail(
      Status::NotSupported("this dlfs was built without MPI (install libopenmpi-dev and rebuild)"));
#endif
}

}  // namespace dlfs::cli

int main(int argc, char** argv) {
  using namespace dlfs::cli;
  CLI::App app{
      "dlfs: pack many small training samples into one volume and read them back fast.\n"
      "Exit codes: 0 ok, 1 damaged samples found (verify), 2 error or bad input."};
  app.require_subcommand(1);
  app.set_version_flag("--version", "dlfs " DLFS_VERSION_STRING);
  int rc = kExitOk;
  for (auto add : {AddPack, AddInfo, AddLs, AddCat, AddVerify, AddRepair, AddEpoch, AddBench,
                   AddLmdb, AddMount}) {
    add(app, &rc);
  }
  // The first word names the verb: an unknown one (or none) is said in those
  // words, with the verbs there are (CLI11 would say "A subcommand is
  // required" for a mistyped verb).
  if (argc < 2 || argv[1][0] != '-') {
    const std::string verb = argc < 2 ? "" : argv[1];
    std::string verbs;
    bool known = false;
    for (const CLI::App* sub : app.get_subcommands({})) {
      verbs += (verbs.empty() ? "" : ", ") + sub->get_name();
      known = known || sub->get_name() == verb;
    }
    if (!known) {
      std::fprintf(stderr, "dlfs: %s; the verbs are %s (dlfs VERB --help)\n",
                   verb.empty() ? "no verb given" : ("unknown verb '" + verb + "'").c_str(),
                   verbs.c_str());
      return kExitError;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    // --help and --version exit 0; every parse error exits kExitError.
    return app.exit(e) == 0 ? kExitOk : kExitError;
  }
  // A report cut short (a full disk, a closed pipe) fails the command; a
  // verb that failed has said why already (cat names a failed stdout).
  if (rc != kExitError && (std::fflush(stdout) != 0 || std::ferror(stdout))) {
    const int failed = Fail(dlfs::Status::FromErrno(errno != 0 ? errno : EIO, "stdout"));
    if (rc == kExitOk) rc = failed;
  }
  return rc;
}
