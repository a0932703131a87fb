// SourceState: a source's position as text, and the check that a saved
// position fits the source asked to resume it.
#include <charconv>
#include <cstring>
#include <map>

#include "dlfs/batch_source.h"

namespace dlfs {

namespace {

constexpr std::string_view kHeader = "dlfs-source-state 3";
constexpr std::string_view kHeaderV2 = "dlfs-source-state 2";  // no order: order 1
constexpr std::string_view kHeaderV1 = "dlfs-source-state 1";  // nor segments, quarantine

std::string JoinIndices(const std::vector<uint64_t>& v) {
  std::string out;
  for (uint64_t i : v) out += (out.empty() ? "" : ",") + std::to_string(i);
  return out;
}

// The fields in the order Serialize writes them, with their text.
std::vector<std::pair<std::string, std::string>> Fields(const SourceState& s) {
  const SamplerOptions& o = s.sampler;
  return {{"epoch", std::to_string(s.epoch)},
          {"batches", std::to_string(s.batches)},
          {"segments", FormatEpochSegments(s.done)},
          {"quarantine", JoinIndices(s.quarantined)},
          {"volume_uuid", s.volume_uuid},
          {"volume_samples", std::to_string(s.volume_samples)},
          {"samples", std::to_string(s.samples)},
          {"subset_crc", std::to_string(s.subset_crc)},
          {"seed", std::to_string(o.seed)},
          {"shuffle", o.shuffle ? "1" : "0"},
          {"batch_size", std::to_string(o.batch_size)},
          {"drop_last", o.drop_last ? "1" : "0"},
          {"rank", std::to_string(o.rank)},
          {"world_size", std::to_string(o.world_size)},
          {"order", std::to_string(s.order)}};
}

template <typename T>
bool ParseNumber(std::string_view text, T* out) {
  const char* end = text.data() + text.size();
  auto [p, ec] = std::from_chars(text.data(), end, *out);
  return ec == std::errc() && p == end && !text.empty();
}

}  // namespace

std::string FormatEpochSegments(const std::vector<EpochSegment>& done) {
  std::string out;
  for (const EpochSegment& d : done) {
    if (!out.empty()) out += ';';
    out += "world_size=" + std::to_string(d.world_size) + ",workers=" + std::to_string(d.workers) +
           ",batch_size=" + std::to_string(d.batch_size) + ",batches=" + std::to_string(d.batches);
  }
  return out;
}

Result<std::vector<EpochSegment>> ParseEpochSegments(std::string_view text) {
  std::vector<EpochSegment> out;
  const std::string whole(text.substr(0, 200));
  auto bad = [&] { return Status::InvalidArgument("malformed epoch segments '" + whole + "'"); };
  while (!text.empty()) {
    const size_t semi = text.find(';');
    std::string_view one = text.substr(0, semi);
    text = semi == std::string_view::npos ? std::string_view() : text.substr(semi + 1);
    EpochSegment d;
    int seen = 0;
    while (!one.empty()) {
      const size_t comma = one.find(',');
      const std::string_view kv = one.substr(0, comma);
      one = comma == std::string_view::npos ? std::string_view() : one.substr(comma + 1);
      const size_t eq = kv.find('=');
      if (eq == std::string_view::npos) return bad();
      const std::string_view k = kv.substr(0, eq), v = kv.substr(eq + 1);
      bool ok = false;
      if (k == "world_size") {
        ok = ParseNumber(v, &d.world_size);
        seen |= 1;
      } else if (k == "workers") {
        ok = ParseNumber(v, &d.workers);
        seen |= 2;
      } else if (k == "batch_size") {
        ok = ParseNumber(v, &d.batch_size);
        seen |= 4;
      } else if (k == "batches") {
        ok = ParseNumber(v, &d.batches);
        seen |= 8;
      }
      if (!ok) return bad();
    }
    if (seen != 15) return bad();
    out.push_back(d);
  }
  DLFS_RETURN_IF_ERROR(CheckEpochSegments(out));
  return out;
}

std::string SourceState::Serialize() const {
  std::string out(kHeader);
  out += '\n';
  for (const auto& [k, v] : Fields(*this)) out += k + " " + v + "\n";
  return out;
}

Result<SourceState> SourceState::Parse(std::string_view text) {
  auto bad = [](size_t line, const std::string& why) {
    return Status::InvalidArgument("source state, line " + std::to_string(line) + ": " + why);
  };
  std::map<std::string, std::string, std::less<>> values;
  size_t line_no = 0;
  bool header = false, v1 = false, v2 = false;
  while (!text.empty()) {
    const size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    ++line_no;
    if (line.empty()) continue;
    if (!header) {
      v1 = line == kHeaderV1;
      v2 = line == kHeaderV2;
      if (line != kHeader && !v1 && !v2) {
        return bad(line_no, "expected '" + std::string(kHeader) + "', found '" +
                                std::string(line.substr(0, 64)) + "'");
      }
      header = true;
      continue;
    }
    const size_t sp = line.find(' ');
    if (sp == std::string_view::npos) return bad(line_no, "expected 'key value'");
    std::string key(line.substr(0, sp));
    if (!values.emplace(key, std::string(line.substr(sp + 1))).second) {
      return bad(line_no, "'" + key + "' appears twice");
    }
  }
  if (!header) return Status::InvalidArgument("source state: empty");
  SourceState s;
  s.order = 1;  // a state that does not say: before the order had versions
  // Every field Serialize writes must be there, and nothing else.
  for (const auto& [key, unused] : Fields(s)) {
    const bool optional =
        ((v1 || v2) && key == "order") || (v1 && (key == "segments" || key == "quarantine"));
    if (values.find(key) == values.end() && !optional) {
      return Status::InvalidArgument("source state: '" + key + "' is missing");
    }
  }
  for (const auto& [key, value] : values) {
    bool ok = true;
    SamplerOptions& o = s.sampler;
    uint32_t flag = 0;
    if (key == "epoch") {
      ok = ParseNumber(value, &s.epoch);
    } else if (key == "batches") {
      ok = ParseNumber(value, &s.batches);
    } else if (key == "segments") {
      {
        Result<std::vector<EpochSegment>> done = ParseEpochSegments(value);
        ok = done.ok();
        if (ok) s.done = std::move(done).value();
      }
    } else if (key == "quarantine") {
      std::string_view rest = value;
      while (ok && !rest.empty()) {
        const size_t comma = rest.find(',');
        uint64_t i = 0;
        ok = ParseNumber(rest.substr(0, comma), &i) &&
             (s.quarantined.empty() || s.quarantined.back() < i);
        s.quarantined.push_back(i);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
        ok = ok && !(comma != std::string_view::npos && rest.empty());
      }
    } else if (key == "volume_uuid") {
      s.volume_uuid = value;
    } else if (key == "volume_samples") {
      ok = ParseNumber(value, &s.volume_samples);
    } else if (key == "samples") {
      ok = ParseNumber(value, &s.samples);
    } else if (key == "subset_crc") {
      ok = ParseNumber(value, &s.subset_crc);
    } else if (key == "seed") {
      ok = ParseNumber(value, &o.seed);
    } else if (key == "shuffle" || key == "drop_last") {
      ok = ParseNumber(value, &flag) && flag <= 1;
      (key == "shuffle" ? o.shuffle : o.drop_last) = flag == 1;
    } else if (key == "batch_size") {
      ok = ParseNumber(value, &o.batch_size);
    } else if (key == "rank") {
      ok = ParseNumber(value, &o.rank);
    } else if (key == "world_size") {
      ok = ParseNumber(value, &o.world_size);
    } else if (key == "order") {
      ok = ParseNumber(value, &s.order) && s.order >= 1;
    } else {
      return Status::InvalidArgument("source state: unknown key '" + key + "'");
    }
    if (!ok) {
      return Status::InvalidArgument("source state: '" + key + "' has a bad value '" +
                                     value.substr(0, 64) + "'");
    }
  }
  return s;
}

Status CheckResumable(const SourceState& saved, const SourceState& current,
                      const std::string& who) {
  std::string diffs;
  auto differ = [&](const std::string& what, const std::string& then, const std::string& now) {
    if (then == now) return;
    diffs += (diffs.empty() ? "" : "; ") +
             ("it was saved with " + what + " " + then + ", this loader has " + what + " " + now);
  };
  differ("volume", saved.volume_uuid + " (" + std::to_string(saved.volume_samples) + " samples)",
         current.volume_uuid + " (" + std::to_string(current.volume_samples) + " samples)");
  differ("sample count", std::to_string(saved.samples), std::to_string(current.samples));
  if (saved.subset_crc != current.subset_crc) {
    diffs += (diffs.empty() ? "" : "; ") + std::string("it was saved reading another subset");
  }
  const SamplerOptions& a = saved.sampler;
  const SamplerOptions& b = current.sampler;
  differ("seed", std::to_string(a.seed), std::to_string(b.seed));
  differ("shuffle", a.shuffle ? "on" : "off", b.shuffle ? "on" : "off");
  differ("drop_last", a.drop_last ? "on" : "off", b.drop_last ? "on" : "off");
  if (diffs.empty() && (a.world_size == 0 || a.batch_size == 0 || a.rank >= a.world_size)) {
    diffs = "it says rank " + std::to_string(a.rank) + " of " + std::to_string(a.world_size) +
            ", batch size " + std::to_string(a.batch_size);
  }
  if (diffs.empty() && saved.order != current.order) {
    // Another order: only a position at an epoch boundary means the same.
    const uint64_t per = SamplesPerShard(saved.samples, a.world_size, a.batch_size, a.drop_last);
    const uint64_t whole = per / a.batch_size + (per % a.batch_size != 0 ? 1 : 0);
    if (!saved.done.empty() || (saved.batches > 0 && saved.batches < whole)) {
      diffs = "it was saved in the middle of epoch " + std::to_string(saved.epoch) + " (" +
              std::to_string(saved.batches) + " batches handed out" +
              (saved.done.empty() ? "" : " after earlier parts") + ") with epoch order " +
              std::to_string(saved.order) +
              (saved.order == 1 ? " (Fisher-Yates, dlfs before the order had versions)" : "") +
              ", and this dlfs reads epoch order " + std::to_string(current.order) +
              ": which samples those batches held cannot be told. Resume at an epoch boundary: "
              "the state with batches 0 and no segments reads epoch " +
              std::to_string(saved.epoch) + " again whole; with epoch " +
              std::to_string(saved.epoch + 1) + " and batches 0 it goes on with the next epoch";
    }
  }
  if (diffs.empty()) return Status::Ok();
  return Status::InvalidArgument(who + ": cannot resume from this state: " + diffs);
}

ResumePoint PlanResume(const SourceState& saved, const SamplerOptions& mine) {
  ResumePoint p;
  p.epoch = saved.epoch;
  p.done = saved.done;
  if (saved.sampler.world_size == mine.world_size && saved.sampler.batch_size == mine.batch_size) {
    p.batches = saved.batches;
  } else if (saved.batches > 0) {
    p.done.push_back({saved.sampler.world_size, 1, saved.sampler.batch_size, saved.batches});
  }
  return p;
}

}  // namespace dlfs
