#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "common/clock.h"
#include "dlfs/pack.h"
#include "pack/importer.h"

namespace dlfs {

namespace pack_internal {

PackContext::PackContext(VolumeBuilder& builder, const PackOptions& options, PackStats& stats)
    : builder_(builder),
      options_(options),
      stats_(stats),
      start_(Now()),
      last_report_(start_ - 1) {}  // the first sample is reported at once

Status PackContext::Unreadable(const std::string& path, const Status& error) {
  if (!options_.skip_unreadable) {
    return Status(error.code(),
                  error.message() + " (set skip_unreadable to skip sources that fail)",
                  error.sys_errno());
  }
  ++stats_.skipped;
  if (stats_.skipped_examples.size() < 10) stats_.skipped_examples.push_back(error.message());
  (void)path;
  return Status::Ok();
}

void PackContext::CountSourceBytes(const std::vector<std::string>& files) {
  uint64_t total = 0;
  for (const std::string& f : files) {
    struct stat st;
    if (::stat(f.c_str(), &st) == 0) total += static_cast<uint64_t>(st.st_size);
  }
  progress_.total_source_bytes = total;
}

void PackContext::BeginSource(const std::string& file) {
  builder_.SetSourceName(file);
  progress_.source_bytes += current_source_bytes_;
  struct stat st;
  current_source_bytes_ = ::stat(file.c_str(), &st) == 0 ? static_cast<uint64_t>(st.st_size) : 0;
}

void PackContext::Ignore(Ignored why, const std::string& rel_path) {
  std::vector<std::string>* examples = &stats_.ignored_examples;
  switch (why) {
    case Ignored::kNotImage:
      ++stats_.ignored_not_image;
      break;
    case Ignored::kAtRoot:
      ++stats_.ignored_at_root;
      break;
    case Ignored::kHiddenClass:
      ++stats_.skipped_hidden_classes;
      [[fallthrough]];
    case Ignored::kHidden:
      ++stats_.skipped_hidden;
      examples = &stats_.skipped_hidden_examples;
      break;
  }
  if (examples->size() < 5) examples->push_back(rel_path);
}

Status PackContext::Tick() {
  if (options_.cancel != nullptr && options_.cancel->load(std::memory_order_relaxed)) {
    return Status::Cancelled("packing interrupted");
  }
  if (!options_.on_progress) return Status::Ok();
  if (Now() - last_report_ < 0.1) return Status::Ok();
  Report();
  return Status::Ok();
}

void PackContext::Report() {
  if (!options_.on_progress) return;
  const double now = Now();
  last_report_ = now;
  progress_.samples = builder_.sample_count();
  progress_.bytes = builder_.data_bytes();
  progress_.skipped = stats_.skipped + builder_.image_stats().skipped;
  progress_.seconds = now - start_;
  options_.on_progress(progress_);
}

}  // namespace pack_internal

namespace {

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

bool IsTarName(std::string_view name) {
  for (std::string_view ext : {".tar", ".tar.gz", ".tgz", ".tar.xz", ".tar.zst", ".tar.bz2"}) {
    if (EndsWith(name, ext)) return true;
  }
  return false;
}

bool IsIdxName(std::string_view name) { return name.find("-ubyte") != name.npos; }

// Refuses targets that packing would read back or overwrite: inside a
// source directory (the temporary files grow next to them while the source
// is walked), or the source file itself. Paths are compared after
// resolving symbolic links and "..".
Status CheckOutsideSource(const std::string& source, const std::string& volume_path,
                          const VolumeBuilder::Options& volume) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path src = fs::weakly_canonical(source, ec);
  if (ec) return Status::Ok();  // the importer reports an unreadable source
  const bool is_dir = fs::is_directory(src, ec);
  for (const std::string& target : volume.TargetPaths(volume_path)) {
    const fs::path out = fs::weakly_canonical(fs::absolute(target, ec), ec);
    if (ec) continue;  // the builder reports a bad target path
    if (out == src) {
      return Status::InvalidArgument(target + ": is the source " + source +
                                     " itself; write the volume elsewhere");
    }
    const fs::path rel = out.lexically_relative(src);
    if (is_dir && !rel.empty() && *rel.begin() != "..") {
      return Status::InvalidArgument(target + ": is inside the source directory " + source +
                                     ", so packing would read its own output; write the volume "
                                     "elsewhere");
    }
  }
  return Status::Ok();
}

}  // namespace

std::string_view SourceKindName(SourceKind kind) { return NameOf(kSourceKindNames, kind); }

Result<SourceKind> ParseSourceKind(std::string_view name) {
  return ParseEnum(kSourceKindNames, name, "source kind");
}

Result<SourceKind> DetectSourceKind(const std::string& source) {
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) {
    const int err = errno;
    // A Megatron dataset is named by the prefix of its two files.
    if (err == ENOENT && pack_internal::IsMegatronSource(source)) return SourceKind::kMegatron;
    return Status::FromErrno(err, source);
  }
  if (S_ISREG(st.st_mode)) {
    if (IsTarName(source)) return SourceKind::kTar;
    if (EndsWith(source, "data.mdb")) return SourceKind::kLmdb;
    if ((EndsWith(source, ".bin") || EndsWith(source, ".idx")) &&
        pack_internal::IsMegatronSource(source)) {
      return SourceKind::kMegatron;
    }
    if (EndsWith(source, ".npy")) return SourceKind::kTokens;
    return Status::InvalidArgument(
        source +
        ": a single file can only be a tar shard (.tar, .tar.gz, ...), a data.mdb, a Megatron "
        "dataset's .bin or .idx (with the other beside it) or a .npy of tokens (a flat file of "
        "tokens: the tokens importer with the token_dtype option)");
  }
  if (!S_ISDIR(st.st_mode)) return Status::InvalidArgument(source + ": not a file or directory");
  struct stat mdb;
  if (::stat((source + "/data.mdb").c_str(), &mdb) == 0 && S_ISREG(mdb.st_mode)) {
    return SourceKind::kLmdb;
  }
  DIR* d = ::opendir(source.c_str());
  if (d == nullptr) return Status::FromErrno(errno, source);
  bool any_idx = false, any_tar = false, any_other = false;
  while (dirent* e = ::readdir(d)) {
    const std::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    if (IsIdxName(name)) {
      any_idx = true;
    } else if (IsTarName(name)) {
      any_tar = true;
    } else {
      any_other = true;
    }
  }
  ::closedir(d);
  if (any_idx) return SourceKind::kIdx;
  if (any_tar && !any_other) return SourceKind::kTar;
  return SourceKind::kImageFolder;
}

Result<std::vector<std::string>> ParseClassNames(const std::string& spec) {
  std::vector<std::string> names;
  if (spec.empty()) return names;
  if (spec[0] == '@') {
    std::ifstream in(spec.substr(1));
    if (!in) return Status::FromErrno(errno, spec.substr(1));
    for (std::string line; std::getline(in, line);) {
      if (!line.empty() && line.back() == '\r') line.pop_back();
      names.push_back(line);
    }
    if (in.bad()) return Status::FromErrno(errno, spec.substr(1));
    return names;
  }
  for (size_t pos = 0;;) {
    const size_t comma = spec.find(',', pos);
    names.push_back(spec.substr(pos, comma == spec.npos ? spec.npos : comma - pos));
    if (comma == spec.npos) return names;
    pos = comma + 1;
  }
}

std::vector<std::string> ParseFieldNames(std::string_view spec) {
  std::vector<std::string> names;
  while (!spec.empty()) {
    const size_t comma = spec.find(',');
    if (comma != 0) names.emplace_back(spec.substr(0, comma));
    spec = comma == spec.npos ? std::string_view() : spec.substr(comma + 1);
  }
  return names;
}

Result<PackStats> Pack(const std::string& source, const std::string& volume_path,
                       const PackOptions& options) {
  const double start = Now();
  PackStats stats;
  stats.from = options.from;
  if (stats.from == SourceKind::kAuto) {
    DLFS_ASSIGN_OR_RETURN(stats.from, DetectSourceKind(source));
  }
  // An option of another importer is refused, not ignored.
  const auto refuse = [&](const char* option, const char* sources) {
    return Status::InvalidArgument(source + ": the " + option + " option applies to " + sources +
                                   " only (this is a " + std::string(SourceKindName(stats.from)) +
                                   " source)");
  };
  if (!options.fields.empty() && stats.from != SourceKind::kTar) {
    return refuse("fields", "tar shards");
  }
  if (options.all_files && stats.from != SourceKind::kImageFolder) {
    return refuse("all_files", "ImageFolder trees");
  }
  if (options.skip_hidden && stats.from != SourceKind::kImageFolder) {
    return refuse("skip_hidden", "ImageFolder trees");
  }
  if (options.lmdb_payload_only && stats.from != SourceKind::kLmdb) {
    return refuse("lmdb_payload_only", "LMDB databases");
  }
  const bool tokens = stats.from == SourceKind::kMegatron || stats.from == SourceKind::kTokens;
  if (!options.token_dtype.empty() && !tokens) {
    return refuse("token_dtype", "megatron and tokens sources");
  }
  if (!options.lengths.empty() && stats.from != SourceKind::kTokens) {
    return refuse("lengths", "tokens sources");
  }
  if (options.eod && stats.from != SourceKind::kTokens) return refuse("eod", "tokens sources");
  if (options.volume.images.enabled()) {
    if (stats.from == SourceKind::kIdx) {
      return Status::InvalidArgument(source +
                                     ": image preparation applies to encoded images (imagefolder, "
                                     "tar and lmdb sources); IDX images are raw pixels already");
    }
    if (stats.from == SourceKind::kLmdb && !options.lmdb_payload_only) {
      return Status::InvalidArgument(
          source + ": image preparation needs the lmdb_payload_only option: the records are " +
          "stored whole (Caffe Datums, not images) without it");
    }
  }
  DLFS_RETURN_IF_ERROR(CheckOutsideSource(source, volume_path, options.volume));
  VolumeBuilder::Options volume = options.volume;
  if (tokens) {
    // A token volume: its width must be known before the builder is made.
    DLFS_ASSIGN_OR_RETURN(volume.token_width,
                          pack_internal::TokenWidth(source, stats.from, options));
  }
  volume.images.skip_unreadable = options.skip_unreadable;  // one option for every source
  DLFS_ASSIGN_OR_RETURN(std::unique_ptr<VolumeBuilder> builder,
                        VolumeBuilder::Create(volume_path, volume));
  stats.removed_temporaries = builder->removed_temporaries();
  pack_internal::PackContext ctx(*builder, options, stats);
  Status st;
  switch (stats.from) {
    case SourceKind::kImageFolder:
      st = pack_internal::ImportImageFolder(source, ctx);
      break;
    case SourceKind::kIdx:
      st = pack_internal::ImportIdx(source, ctx);
      break;
    case SourceKind::kTar:
      st = pack_internal::ImportTar(source, ctx);
      break;
    case SourceKind::kLmdb:
      st = pack_internal::ImportLmdb(source, ctx);
      break;
    case SourceKind::kMegatron:
      st = pack_internal::ImportMegatron(source, volume.token_width, ctx);
      break;
    case SourceKind::kTokens:
      st = pack_internal::ImportTokens(source, volume.token_width, ctx);
      break;
    case SourceKind::kAuto:
      st = Status::InvalidArgument("no importer");
      break;
  }
  DLFS_RETURN_IF_ERROR(st);
  ctx.BeginSource("");  // every source is done
  ctx.Report();
  if (!options.class_names.empty()) builder->SetClassNames(options.class_names);
  DLFS_RETURN_IF_ERROR(builder->Finish());
  // Counted once written: samples being prepared and those a trained
  // dictionary held are in only now, and images left out are not.
  stats.samples = builder->sample_count();
  stats.classes = builder->class_count();
  stats.dictionary_bytes = builder->dictionary_bytes();
  stats.bytes = builder->data_bytes();
  stats.token_width = volume.token_width;
  stats.tokens = volume.token_width == 0 ? 0 : stats.bytes / volume.token_width;
  stats.images = builder->image_stats();
  stats.skipped += stats.images.skipped;
  for (const std::string& e : stats.images.skipped_examples) {
    if (stats.skipped_examples.size() < 10) stats.skipped_examples.push_back(e);
  }
  stats.seconds = Now() - start;
  return stats;
}

}  // namespace dlfs
