#include "cache/fill_plan.h"

#include <algorithm>
#include <cstdio>

namespace dlfs::cache_internal {

FillDecision DecideFill(const FillInputs& in) {
  FillDecision d;
  const double bytes = static_cast<double>(in.cacheable_bytes);
  const double scan = in.costs.scan * bytes, fill = in.costs.fill * bytes;
  d.cost_seconds = scan + fill * std::clamp(in.costs.slowed, 0.0, 1.0);
  d.cost_per_gb = (in.costs.scan + in.costs.fill) * 1e9;
  const double e = std::max(0.0, in.epochs_after);
  // What is left to fill over what an epoch hands out: a fill decided
  // again with a fifth of the volume left lasts a fifth as long (counted as
  // the whole volume, a Fashion-MNIST fill 80 % done was stopped as
  // "lasting 7 epochs" of 12).
  const double share = in.epoch_bytes > 0 ? bytes / static_cast<double>(in.epoch_bytes) : 1.0;
  d.fill_epochs = in.costs.wall > 0 && in.costs.pace > 0
                      ? in.costs.wall / in.costs.pace * share / std::max(1.0, in.fillers)
                      : 0;
  const double f = d.fill_epochs;
  const double saved_epochs = f <= e ? e - f / 2 : e * e / (2 * f);
  d.saving_seconds = saved_epochs * in.costs.read * bytes;
  d.fill = in.cacheable_bytes > 0 && (in.requested || d.saving_seconds > d.cost_seconds);
  char lasting[64] = "";
  if (f > 0) std::snprintf(lasting, sizeof lasting, " (the fill lasting %.2g of them)", f);
  char text[320];
  char requested[96];
  std::snprintf(requested, sizeof requested, "fill (%s)", in.requested_as);
  char nothing[96];
  std::snprintf(nothing, sizeof nothing, "nothing to fill (%s)", in.requested_as);
  std::snprintf(text, sizeof text,
                "%s: saves %.2f s over %.3g epochs%s for %.2f s (read %.2f, copy %.2f, %.0f %% of "
                "it taken from the reader)",
                in.cacheable_bytes == 0 ? (in.requested ? nothing : "nothing to fill")
                : in.requested          ? requested
                : d.fill                ? "fill"
                                        : "no fill",
                d.saving_seconds, in.epochs_after, lasting, d.cost_seconds, scan, fill,
                100 * std::clamp(in.costs.slowed, 0.0, 1.0));
  d.reason = text;
  return d;
}

HoldWhole DecideHoldWhole(double epochs_after) {
  HoldWhole h;
  h.hold = epochs_after >= kHoldEpochsAfter;
  if (h.hold) return h;
  char text[128];
  if (epochs_after < 1) {
    std::snprintf(text, sizeof text, "no fill: no epoch after this one");
  } else {
    std::snprintf(text, sizeof text, "no fill: %.3g epoch after this one (held from %.3g)",
                  epochs_after, kHoldEpochsAfter);
  }
  h.reason = text;
  return h;
}

}  // namespace dlfs::cache_internal
