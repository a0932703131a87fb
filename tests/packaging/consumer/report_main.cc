// Links dlfs::report and prints `dlfs info --json` of a volume the way the
// CLI does: SummarizeVolume, then FormatVolumeSummary. Usage: consumer_report
// VOLUME_PATH (the volume `consumer` wrote).
#include <cstdio>

#include "dlfs/summary.h"
#include "dlfs/volume.h"
#include "dlfs_tools/report.h"

int main(int argc, char** argv) {
  if (argc != 2) return 2;
  auto volume = dlfs::Volume::Open(argv[1]);
  if (!volume.ok()) {
    std::fprintf(stderr, "consumer_report: %s\n", volume.status().message().c_str());
    return 1;
  }
  const std::string json =
      dlfs::FormatVolumeSummary(dlfs::SummarizeVolume(**volume), dlfs::ReportFormat::kJson);
  std::fputs(json.c_str(), stdout);
  return 0;
}
