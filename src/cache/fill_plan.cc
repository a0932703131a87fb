#include "cache/fill_plan.h"

#include <algorithm>
#include <cstdio>

namespace dlfs::cache_internal {

FillDecision DecideFill(const FillInputs& in) {
  FillDecision d;
  const double bytes = static_cast<double>(in.cacheable_bytes);
  const double slowed = std::clamp(in.costs.slowed, 0.0, 1.0);
  const double scan = in.costs.scan * bytes, fill = in.costs.fill * bytes;
  const double taken = scan + fill * slowed;  // from the reader while both run
  const double left = std::clamp(in.epoch_left, 0.0, 1.0) * in.costs.pace * bytes;
  d.wait_seconds = std::max(0.0, in.costs.wall * bytes - left);
  d.cost_seconds = std::max(taken, d.wait_seconds);
  d.cost_per_gb = (in.costs.scan + in.costs.fill) * 1e9;
  const double e = std::max(0.0, in.epochs_after);
  d.fill_epochs = in.costs.wall > 0 && in.costs.pace > 0 ? in.costs.wall / in.costs.pace : 0;
  d.saving_seconds = e * in.costs.read * bytes;
  d.fill = in.cacheable_bytes > 0 && (in.requested || d.saving_seconds > d.cost_seconds);
  char lasting[96] = "";
  if (d.fill_epochs > 0) {
    std::snprintf(lasting, sizeof lasting, "; the fill lasting %.2g epochs, %.2f s past this one",
                  d.fill_epochs, d.wait_seconds);
  }
  char text[288];
  std::snprintf(text, sizeof text,
                "%s: saves %.2f s over %.3g epochs for %.2f s (read %.2f, copy %.2f, %.0f %% of it "
                "taken from the reader%s)",
                in.cacheable_bytes == 0
                    ? (in.requested ? "nothing to fill (budget given)" : "nothing to fill")
                : in.requested ? "fill (budget given)"
                : d.fill       ? "fill"
                               : "no fill",
                d.saving_seconds, in.epochs_after, d.cost_seconds, scan, fill, 100 * slowed,
                lasting);
  d.reason = text;
  return d;
}

}  // namespace dlfs::cache_internal
