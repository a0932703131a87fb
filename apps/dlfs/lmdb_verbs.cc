// `dlfs lmdb info` (SummarizeLmdb, dlfs/lmdb.h) and `dlfs lmdb read`
// (RunLmdbRead under mpirun, dlfs_tools/lmdb_read.h).
#include <cstdio>

#include "cli.h"
#include "dlfs/lmdb.h"
#include "dlfs_tools/lmdb_option_table.h"
#ifdef DLFS_HAVE_MPI
#include "dlfs_tools/mpi_report.h"
#endif

namespace dlfs::cli {
namespace {

struct LmdbReadArgs {
  std::string db;
  LmdbReadOptions options;
  bool json = false;
};

int ReadLmdb(const LmdbReadArgs& args) {
#ifdef DLFS_HAVE_MPI
  // The reader lives in the body: it is destroyed before MPI_Finalize.
  return RunWithMpi([&](int rank, int) {
    auto report = RunLmdbRead(MPI_COMM_WORLD, args.db, args.options);
    if (!report.ok()) return FailOnRank0(rank, report.status());
    if (rank == 0) Print(FormatLmdbReadReport(args.db, args.options, *report, FormatOf(args.json)));
    // Each rank names its first mismatch, rank 0 the job's count.
    if (!report->first_mismatch.empty()) {
      std::fprintf(stderr, "dlfs: mismatch at %s\n", report->first_mismatch.c_str());
    }
    if (report->mismatches == 0) return kExitOk;
    if (rank == 0) {
      std::fprintf(stderr, "dlfs: %llu records differ from the database\n",
                   static_cast<unsigned long long>(report->mismatches));
    }
    return kExitDamaged;
  });
#else
  (void)args;
  return Fail(Status::NotSupported(
      "lmdb read needs MPI, and this dlfs was built without it (install libopenmpi-dev and "
      "rebuild)"));
#endif
}

}  // namespace

void AddLmdb(CLI::App& app, int* exit_code) {
  auto* lmdb = app.add_subcommand("lmdb", "Inspect existing LMDB databases (e.g. Caffe's)");
  lmdb->require_subcommand(1);

  struct InfoArgs {
    std::string db;
    bool json = false;
  };
  auto info = std::make_shared<InfoArgs>();
  auto* li = lmdb->add_subcommand(
      "info", "Parse data.mdb directly: entries, tree depth, pages, record sizes, Datum shape");
  li->add_option("db", info->db, "LMDB directory or its data.mdb")->required();
  li->add_flag("--json", info->json, "One JSON object instead of text");
  li->callback([info, exit_code] {
    auto summary = SummarizeLmdb(info->db);
    if (!summary.ok()) return void(*exit_code = Fail(summary.status()));
    Print(FormatLmdbSummary(*summary, FormatOf(info->json)));
  });

  auto read = std::make_shared<LmdbReadArgs>();
  auto* lr = lmdb->add_subcommand(
      "read",
      "Read an LMDB the way Caffe does, from every MPI rank, with the chosen LMDBIO mode.\n"
      "Run under mpirun, e.g. `mpirun -np 4 dlfs lmdb read DB --mode lmm-dio-prov`.\n"
      "Prints per-rank record counts, a digest of the bytes read (equal across modes),\n"
      "and where the time went. See docs/lmdbio.md.");
  lr->add_option("db", read->db, "LMDB directory or its data.mdb")->required();
  AddOptions(lr, options::kLmdbReadOptions, &read->options);
  lr->add_flag("--json", read->json, "One JSON object (from rank 0) instead of text");
  lr->callback([read, exit_code] { *exit_code = ReadLmdb(*read); });
}

}  // namespace dlfs::cli
