#include "cache/fill_plan.h"

#include <algorithm>
#include <cstdio>

namespace dlfs::cache_internal {

FillDecision DecideFill(const FillInputs& in) {
  FillDecision d;
  const double bytes = static_cast<double>(in.cacheable_bytes);
  const double scan = in.costs.scan * bytes, fill = in.costs.fill * bytes;
  d.cost_seconds = scan + fill * std::clamp(in.costs.slowed, 0.0, 1.0);
  d.saving_seconds = in.epochs_after * in.costs.read * bytes;
  d.fill = in.cacheable_bytes > 0 && (in.requested || d.saving_seconds > d.cost_seconds);
  char text[200];
  std::snprintf(text, sizeof text,
                "%s: saves %.2f s over %.3g epochs for %.2f s (read %.2f, copy %.2f, %.0f %% of it "
                "taken from the reader)",
                in.cacheable_bytes == 0
                    ? (in.requested ? "nothing to fill (budget given)" : "nothing to fill")
                : in.requested ? "fill (budget given)"
                : d.fill       ? "fill"
                               : "no fill",
                d.saving_seconds, in.epochs_after, d.cost_seconds, scan, fill,
                100 * std::clamp(in.costs.slowed, 0.0, 1.0));
  d.reason = text;
  return d;
}

}  // namespace dlfs::cache_internal
