// BadSample: a sample found unreadable or damaged — by `dlfs verify`
// (VerifyReport::bad), or by a loader that leaves it out of its batch
// (LoaderOptions::skip_bad_samples). One record for both, so a loader's
// quarantine= takes what verify reports.
#pragma once

#include <cstdint>
#include <string>

namespace dlfs {

struct BadSample {
  uint64_t index = 0;
  std::string path;    // in the volume
  std::string volume;  // the volume's file (empty: not known)
  std::string reason;  // why: the read's, checksum's or decoder's error
};

}  // namespace dlfs
