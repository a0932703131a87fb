// What the harnesses do with a volume that opened: every query a reader
// makes, with the invariants a validated directory promises checked.
#pragma once

#include <algorithm>
#include <vector>

#include "dlfs/summary.h"
#include "dlfs/verify.h"
#include "dlfs/volume.h"
#include "fuzz_util.h"

namespace dlfs::fuzz {

// Reads, looks up and lists (at most `limit` samples); returns the number of
// samples whose checksum failed (VerifyVolume's count).
inline uint64_t ExerciseVolume(const Volume& v, uint64_t limit = 4096) {
  const SampleDirectory& d = v.directory();
  const uint64_t n = std::min<uint64_t>(d.size(), limit);
  // Paths lead back to their samples in a v1 directory (checked whole at
  // open) and in a compact one whose every block and name passes its check
  // (a forged name order may hide a sample, never hand out another).
  const bool paths_hold = !d.compact() || (n == d.size() && d.CheckAll().ok());
  for (uint64_t i = 0; i < n; ++i) {
    // A compact directory's block that fails its check is an error here,
    // and sample() then hands out nothing.
    const Result<SampleInfo> located = d.Locate(i);
    if (!located.ok()) {
      if (d.sample(i).length != 0) Broken("a sample of an unlocatable block has bytes");
      if (v.Read(i).ok()) Broken("a sample of an unlocatable block was read");
      continue;
    }
    const SampleInfo s = *located;
    if (s.target >= v.info().target_details.size()) Broken("sample on a target the volume lacks");
    const TargetInfo& t = v.info().target_details[s.target];
    if (s.offset < t.data_offset || s.offset + s.length > t.data_offset + t.data_length) {
      Broken("sample outside its target's data region");
    }
    // Every sample's path leads back to it.
    if (paths_hold) {
      auto found = d.Lookup(d.Path(i));
      if (!found.ok() || *found != i) Broken("Lookup(Path(i)) != i");
    } else if (auto found = d.Lookup(d.Path(i)); found.ok() && d.Path(*found) != d.Path(i)) {
      Broken("Lookup returned a sample with another path");
    }
    if (s.label != kNoLabel && s.label < d.class_count()) (void)d.class_name(s.label);
    (void)v.ReadStored(i, /*verify=*/true);
    (void)v.Read(i, /*verify=*/true);  // decodes a compressed sample
  }
  for (uint64_t k = 0; k < std::min<uint64_t>(d.dir_count(), limit); ++k) {
    const DirInfo info = d.dir(k);
    auto found = d.Resolve(d.DirPath(k));
    if (paths_hold && (!found.ok() || !found->is_dir || found->index != k)) {
      Broken("Resolve(DirPath(k)) != k");
    }
    (void)info;
  }
  // A token volume (format.md §10.11): a document's first token leads back
  // to it unless it is empty, and windows of tokens read in bounds.
  if (const uint32_t w = d.token_width(); w != 0) {
    if (w != 2 && w != 4) Broken("a token width that is not 2 or 4");
    const uint64_t tokens = d.token_count();
    for (uint64_t i = 0; i < n; ++i) {
      const Result<uint64_t> start = d.DocumentStart(i);
      if (!start.ok()) continue;
      if (*start > tokens) Broken("a document starts past the corpus");
      const Result<SampleInfo> s = d.Locate(i);
      if (s.ok() && s->length > 0) {
        const Result<uint64_t> at = d.DocumentAt(*start);
        if (at.ok() && *at != i) Broken("DocumentAt(DocumentStart(i)) != i");
      }
    }
    if (d.DocumentAt(tokens).ok()) Broken("a document holds the token past the last");
    for (uint64_t first : {uint64_t{0}, tokens / 3, tokens > 0 ? tokens - 1 : 0}) {
      const uint64_t count = std::min<uint64_t>(tokens - std::min(first, tokens), 3000);
      std::vector<std::byte> out(count * w);
      (void)v.ReadTokens(first, count, out);
    }
    std::vector<std::byte> one(w);
    if (v.ReadTokens(tokens, 1, one).ok()) Broken("a token past the corpus was read");
  }
  if (d.dir_count() > 0 && d.size() <= limit) (void)d.SamplesUnder(0);
  // Listings page through any tree without reading out of bounds.
  for (uint64_t k = 0; k < std::min<uint64_t>(d.dir_count(), 64); ++k) {
    for (const uint64_t c : d.ChildDirs(k)) {
      if (c >= d.dir_count()) Broken("a child directory out of range");
    }
    for (const uint64_t i : d.DirSamples(k, 0, limit)) {
      if (i >= d.size()) Broken("a listed sample out of range");
    }
  }
  (void)d.CheckAll();
  (void)SummarizeVolume(v);
  uint64_t bad = 0;
  if (d.size() <= limit) {
    VerifyReport report;
    VerifyOptions options;
    if (!VerifyVolume(v, options, &report).ok()) Broken("VerifyVolume could not run");
    bad = report.bad_samples;
  }
  return bad;
}

}  // namespace dlfs::fuzz
