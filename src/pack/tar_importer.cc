// Tar importer: WebDataset-style shards, read with libarchive (plain or
// compressed tar) through TarShardReader (pack/tar_shards.h).
//
// One pass per shard streams every member into the volume in 1 MiB pieces,
// so memory never depends on a member's (declared or real) size. A key's
// ".cls" label may come before or after its other members, in the same
// shard or another: a sample whose label is not known yet when it is
// written is labelled when the label arrives (VolumeBuilder::SetLabel).
// Hard links get their target's bytes, read again from the shard after the
// pass; symbolic links, FIFOs and devices are refused (or skipped and
// counted with skip_unreadable); absolute paths and ".." are refused.
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "format/format.h"
#include "pack/importer.h"
#include "pack/tar_shards.h"

namespace dlfs::pack_internal {

namespace {

constexpr uint64_t kMaxMemberBytes = 0xFFFFFFFFull;  // a sample's length is a u32
constexpr uint64_t kMaxClsBytes = 4096;

// The field a member becomes: its WebDataset extension without the dot
// ("s/000.seg.png" -> "seg.png"; "" for a member without one).
std::string_view FieldOf(std::string_view path) {
  std::string_view ext = WebDatasetExtension(path);
  if (!ext.empty() && ext.front() == '.') ext.remove_prefix(1);
  return ext;
}

class TarImport {
 public:
  TarImport(const std::vector<std::string>& shards, PackContext& ctx) : shards_(shards), ctx_(ctx) {
    for (const std::string& f : ctx.options().fields) keep_.insert(f);
  }

  Status Run() {
    DLFS_RETURN_IF_ERROR(Plan());
    for (uint32_t s = 0; s < shards_.size(); ++s) DLFS_RETURN_IF_ERROR(ImportShard(s));
    DLFS_RETURN_IF_ERROR(CloseOpen());
    // Keys some of whose members could not be read (skip_unreadable): what
    // arrived, in the order the keys were met.
    for (const std::string& key : buffered_order_) {
      if (buffered_.contains(key)) DLFS_RETURN_IF_ERROR(WriteBuffered(key));
    }
    // Labels that arrived after their samples.
    for (const auto& [sample, key] : pending_) {
      if (labels_[key] != kNoLabel)
        DLFS_RETURN_IF_ERROR(ctx_.builder().SetLabel(sample, labels_[key]));
    }
    return Status::Ok();
  }

 private:
  struct Link {
    uint64_t ordinal;  // the link's own header
    std::string path;
    std::string target;
    uint64_t target_ordinal = 0;  // of the regular file it resolves to
  };

  // ---- Grouping members into samples (WebDataset keys) ----

  // How a key's members become one sample.
  struct KeyPlan {
    uint32_t expected = 0;  // members that become fields
    // All its members are adjacent in one shard and none is a link: its
    // fields stream straight into the volume. Otherwise they are held in
    // memory until the last one arrives.
    bool stream = false;
    uint32_t first_shard = 0;
    uint64_t first_pos = 0, last_pos = 0, members = 0;
    bool has_link = false;
  };

  bool Kept(std::string_view field) const { return keep_.empty() || keep_.contains(field); }

  // Reads every shard's headers (no data) to plan each key, and refuses a
  // key that has one field twice, naming the shards. A shard that cannot
  // be read here is left to the main pass to report.
  Status Plan() {
    std::unordered_map<std::string, uint32_t> seen;  // "key\0field" -> shard
    uint64_t pos = 0;
    for (uint32_t s = 0; s < shards_.size(); ++s) {
      TarShardReader reader(shards_[s], s);
      TarMember m;
      while (true) {
        Result<bool> more = reader.Next(&m);
        if (!more.ok() || !*more) break;
        if (m.type == TarMemberType::kDirectory || m.path.empty()) continue;
        const std::string key(WebDatasetKey(m.path));
        auto [it, fresh] = plan_.try_emplace(key);
        KeyPlan& p = it->second;
        if (fresh) {
          p.first_shard = s;
          p.first_pos = pos;
        }
        p.last_pos = pos++;
        ++p.members;
        const bool data = m.type == TarMemberType::kFile || m.type == TarMemberType::kHardLink;
        p.has_link = p.has_link || m.type != TarMemberType::kFile || p.first_shard != s;
        if (!data) continue;
        const std::string_view field = FieldOf(m.path);
        const auto [where, first] = seen.try_emplace(key + '\0' + std::string(field), s);
        if (!first) {
          return Status::InvalidArgument(
              "key '" + key + "' has two '" + std::string(field) + "' members: " +
              (where->second == s ? "both in " + shards_[s]
                                  : "in " + shards_[where->second] + " and in " + shards_[s]) +
              " (a WebDataset key holds each field once)");
        }
        if (Kept(field)) ++p.expected;
      }
    }
    for (auto& [key, p] : plan_) {
      p.stream = !p.has_link && p.last_pos - p.first_pos + 1 == p.members;
    }
    return Status::Ok();
  }

  // Ends the sample whose fields are streaming, if any.
  Status CloseOpen() {
    if (!open_) return Status::Ok();
    open_ = false;
    VolumeBuilder& b = ctx_.builder();
    DLFS_RETURN_IF_ERROR(b.EndSample());
    if (open_label_ == kNoLabel) pending_.emplace_back(b.sample_count() - 1, KeyId(open_key_));
    return ctx_.Tick();
  }

  uint32_t LabelOf(const std::string& key) {
    const auto known = key_ids_.find(key);
    return known != key_ids_.end() ? labels_[known->second] : kNoLabel;
  }

  // Writes buffered key `key` as one sample and forgets it.
  Status WriteBuffered(const std::string& key) {
    auto node = buffered_.extract(key);
    VolumeBuilder& b = ctx_.builder();
    const uint32_t label = LabelOf(key);
    DLFS_RETURN_IF_ERROR(b.BeginSample(key, label));
    for (const auto& [field, bytes] : node.mapped()) {
      Status st = b.AddField(field, bytes);
      if (!st.ok()) {
        b.AbortSample();
        return st;
      }
    }
    DLFS_RETURN_IF_ERROR(b.EndSample());
    if (label == kNoLabel) pending_.emplace_back(b.sample_count() - 1, KeyId(key));
    return ctx_.Tick();
  }

  uint32_t KeyId(std::string_view key) {
    auto [it, fresh] =
        key_ids_.try_emplace(std::string(key), static_cast<uint32_t>(labels_.size()));
    if (fresh) labels_.push_back(kNoLabel);
    return it->second;
  }

  Status SetKeyLabel(const std::string& shard, const std::string& member, uint32_t label) {
    const std::string_view key = WebDatasetKey(member);
    uint32_t& slot = labels_[KeyId(key)];
    if (slot != kNoLabel && slot != label) {
      return Status::InvalidArgument(shard + ": member '" + member + "' says class " +
                                     std::to_string(label) + ", but another .cls member of key '" +
                                     std::string(key) + "' said " + std::to_string(slot));
    }
    slot = label;
    return Status::Ok();
  }

  // Reads the current member, a ".cls", as a class number. A read failure
  // sets *source_failed.
  Result<uint32_t> ReadLabel(TarShardReader& reader, const TarMember& m, bool* source_failed,
                             std::string* raw) {
    const std::string& shard = reader.path();
    if (m.size > kMaxClsBytes) {
      return Status::InvalidArgument(shard + ": member '" + m.path + "' has " +
                                     std::to_string(m.size) +
                                     " bytes, too many for a class number");
    }
    std::string text(m.size, '\0');
    size_t got = 0;
    while (got < text.size()) {
      Result<size_t> n =
          reader.Read({reinterpret_cast<std::byte*>(text.data()) + got, text.size() - got});
      if (!n.ok()) *source_failed = true;
      DLFS_RETURN_IF_ERROR(n.status());
      if (*n == 0) break;
      got += *n;
    }
    text.resize(got);
    *raw = text;
    std::string_view t(text);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.back()))) t.remove_suffix(1);
    while (!t.empty() && std::isspace(static_cast<unsigned char>(t.front()))) t.remove_prefix(1);
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), v);
    if (ec != std::errc() || end != t.data() + t.size() || v >= format::kNone - 1) {
      return Status::InvalidArgument(shard + ": member '" + m.path + "' is not a class number: '" +
                                     std::string(t.substr(0, 40)) + "'");
    }
    return static_cast<uint32_t>(v);
  }

  // Copies the current member of `reader` (`size` bytes) into the volume as
  // sample `path`, labelled if its key's label is known. A failure to read
  // the shard sets *source_failed; any other error is the volume's.
  Status Stream(TarShardReader& reader, const std::string& path, uint64_t size,
                bool* source_failed) {
    const std::string& shard = reader.path();
    if (size > kMaxMemberBytes) {
      return Status::InvalidArgument(shard + ": member '" + path + "' is too large (" +
                                     std::to_string(size) + " bytes; a sample holds < 4 GiB)");
    }
    const std::string key(WebDatasetKey(path));
    const std::string field(FieldOf(path));
    if (!Kept(field)) return Status::Ok();  // --fields: read past it
    VolumeBuilder& b = ctx_.builder();
    const KeyPlan& plan = plan_[key];
    // Sized by the largest member so far (bytes that exist: a member whose
    // declared size was beyond the archive never gets here), at most kCopyChunk.
    if (buf_.size() < std::min<uint64_t>(size, kCopyChunk))
      buf_.resize(std::min<uint64_t>(size, kCopyChunk));
    if (!plan.stream) {
      // Held until the key's last member arrives (a key spread over shards,
      // or with links).
      std::vector<std::byte> bytes;
      while (true) {
        Result<size_t> n = reader.Read(buf_);
        if (!n.ok()) *source_failed = true;
        DLFS_RETURN_IF_ERROR(n.status());
        if (*n == 0) break;
        bytes.insert(bytes.end(), buf_.begin(), buf_.begin() + *n);
      }
      return AddBuffered(key, field, std::move(bytes));
    }
    if (!open_ || open_key_ != key) {
      DLFS_RETURN_IF_ERROR(CloseOpen());
      open_label_ = LabelOf(key);
      DLFS_RETURN_IF_ERROR(b.BeginSample(key, open_label_).WithContext(shard));
      open_ = true;
      open_key_ = key;
    }
    Status st = b.BeginField(field).WithContext(shard + ": member '" + path + "'");
    while (st.ok()) {
      Result<size_t> n = reader.Read(buf_);
      st = n.status();
      if (!st.ok()) *source_failed = true;
      if (st.ok() && *n == 0) break;
      if (st.ok()) st = b.Append({buf_.data(), *n});
    }
    if (st.ok()) st = b.EndField();
    if (!st.ok()) {
      b.AbortSample();
      open_ = false;
      return st;
    }
    return Status::Ok();
  }

  Status AddBuffered(const std::string& key, const std::string& field,
                     std::vector<std::byte> bytes) {
    auto [it, fresh] = buffered_.try_emplace(key);
    if (fresh) buffered_order_.push_back(key);
    it->second.emplace_back(field, std::move(bytes));
    if (it->second.size() == plan_[key].expected) return WriteBuffered(key);
    return Status::Ok();
  }

  // A .cls member's text as the key's "cls" field (when kept).
  Status ClsField(const std::string& shard, const std::string& path, const std::string& text) {
    const std::string key(WebDatasetKey(path));
    const std::string field(FieldOf(path));
    if (!Kept(field)) return Status::Ok();
    const auto* p = reinterpret_cast<const std::byte*>(text.data());
    if (!plan_[key].stream) return AddBuffered(key, field, {p, p + text.size()});
    VolumeBuilder& b = ctx_.builder();
    if (!open_ || open_key_ != key) {
      DLFS_RETURN_IF_ERROR(CloseOpen());
      open_label_ = LabelOf(key);
      DLFS_RETURN_IF_ERROR(b.BeginSample(key, open_label_).WithContext(shard));
      open_ = true;
      open_key_ = key;
    }
    return b.AddField(field, {p, text.size()}).WithContext(shard + ": member '" + path + "'");
  }

  // One member of shard `s` (not a directory), by type.
  Status Member(TarShardReader& reader, const TarMember& m,
                std::unordered_map<std::string, std::pair<uint32_t, std::string>>* cls_here,
                std::vector<Link>* links, bool* source_failed) {
    const std::string& shard = reader.path();
    const bool cls = WebDatasetExtension(m.path) == ".cls";
    switch (m.type) {
      case TarMemberType::kFile:
        if (!cls) return Stream(reader, m.path, m.size, source_failed);
        {
          std::string text;
          DLFS_ASSIGN_OR_RETURN(const uint32_t label, ReadLabel(reader, m, source_failed, &text));
          (*cls_here)[m.path] = {label, text};
          DLFS_RETURN_IF_ERROR(SetKeyLabel(shard, m.path, label));
          return ClsField(shard, m.path, text);
        }
      case TarMemberType::kHardLink:
        if (!cls) {
          links->push_back({m.ordinal, m.path, m.link});
          return Status::Ok();
        }
        // A .cls linked to another (e.g. identical files deduplicated by
        // hard links): the same class.
        if (const auto target = cls_here->find(m.link); target != cls_here->end()) {
          const auto found = target->second;
          (*cls_here)[m.path] = found;
          DLFS_RETURN_IF_ERROR(SetKeyLabel(shard, m.path, found.first));
          return ClsField(shard, m.path, found.second);
        }
        return ctx_.Unreadable(
            shard, Status::InvalidArgument(shard + ": member '" + m.path + "' is a hard link to '" +
                                           m.link + "', which is not an earlier .cls member"));
      default:
        return ctx_.Unreadable(
            shard, Status::InvalidArgument(shard + ": member '" + m.path + "' is a " +
                                           TarMemberTypeName(m) +
                                           "; only regular files and hard links are packed"));
    }
  }

  Status ImportShard(uint32_t s) {
    const std::string& shard = shards_[s];
    ctx_.BeginSource(shard);  // progress, and a duplicate path names both shards
    TarShardReader reader(shard, s);
    std::unordered_map<std::string, std::pair<uint32_t, std::string>>
        cls_here;  // .cls: label, text
    std::vector<Link> links;
    TarMember m;
    while (true) {
      Result<bool> more = reader.Next(&m);
      Status st = more.status();
      bool source_failed = !st.ok();
      if (st.ok() && !*more) break;
      if (st.ok() && (m.type == TarMemberType::kDirectory || m.path.empty())) continue;
      if (st.ok()) DLFS_RETURN_IF_ERROR(CheckTarMemberPath(shard, m.path));
      // A streaming sample ends where another key's member starts.
      if (st.ok() && open_ && WebDatasetKey(m.path) != open_key_) {
        DLFS_RETURN_IF_ERROR(CloseOpen());
      }
      if (st.ok()) st = Member(reader, m, &cls_here, &links, &source_failed);
      if (st.ok()) continue;
      if (!source_failed) return st;
      // The shard cannot be read past here: stop, or (skipping) keep the
      // members read so far and go on with the next shard.
      DLFS_RETURN_IF_ERROR(ctx_.Unreadable(shard, st));
      break;
    }
    DLFS_RETURN_IF_ERROR(CloseOpen());
    return ResolveLinks(s, std::move(links));
  }

  // Gives each hard link of shard `s` (in header order) its target's bytes:
  // one scan of the headers finds the regular file each resolves to (the
  // latest earlier member of that path, through chains of links), then the
  // targets are read again in shard order.
  Status ResolveLinks(uint32_t s, std::vector<Link> links) {
    if (links.empty()) return Status::Ok();
    const std::string& shard = shards_[s];
    std::unordered_set<std::string> needed;
    for (const Link& l : links) needed.insert(l.target);
    for (const Link& l : links) needed.insert(l.path);   // chains: links to links
    std::unordered_map<std::string, uint64_t> resolved;  // path -> ordinal of a regular file
    std::vector<Link> ok;
    {
      TarShardReader scan(shard, s);
      TarMember m;
      size_t next = 0;
      while (next < links.size()) {
        Result<bool> more = scan.Next(&m);
        if (!more.ok() || !*more) break;  // the main pass reported the damage
        const bool is_link = m.type == TarMemberType::kHardLink;
        std::optional<uint64_t> target;
        if (is_link) {
          const auto t = resolved.find(m.link);
          if (t != resolved.end()) target = t->second;
        }
        if (next < links.size() && links[next].ordinal == m.ordinal) {
          Link& l = links[next++];
          if (!target) {
            DLFS_RETURN_IF_ERROR(ctx_.Unreadable(
                shard, Status::InvalidArgument(shard + ": member '" + l.path +
                                               "' is a hard link to '" + l.target +
                                               "', which is not an earlier regular file of the "
                                               "shard")));
          } else {
            l.target_ordinal = *target;
            ok.push_back(std::move(l));
          }
        }
        if (needed.contains(m.path)) {
          if (m.type == TarMemberType::kFile) {
            resolved[m.path] = m.ordinal;
          } else if (target) {
            resolved[m.path] = *target;
          } else {
            resolved.erase(m.path);  // now names something that is not a file
          }
        }
      }
    }
    std::sort(ok.begin(), ok.end(),
              [](const Link& a, const Link& b) { return a.target_ordinal < b.target_ordinal; });
    TarShardReader reader(shard, s);
    for (const Link& l : ok) {
      Result<TarMember> target = reader.SeekTo(l.target_ordinal);
      Status st = target.status();
      bool source_failed = !st.ok();
      if (st.ok()) st = Stream(reader, l.path, target->size, &source_failed);
      if (st.ok()) continue;
      if (!source_failed) return st;
      DLFS_RETURN_IF_ERROR(ctx_.Unreadable(shard, st.WithContext("hard link '" + l.path + "'")));
    }
    return Status::Ok();
  }

  const std::vector<std::string>& shards_;
  PackContext& ctx_;
  std::vector<std::byte> buf_;
  // Every key seen with a label or an unlabelled sample, and its label.
  std::unordered_map<std::string, uint32_t> key_ids_;
  std::vector<uint32_t> labels_;
  // Samples written before their key had a label: (sample number, key id).
  std::vector<std::pair<uint64_t, uint32_t>> pending_;
  // --fields: the fields kept (all when empty).
  std::unordered_set<std::string_view> keep_;
  std::unordered_map<std::string, KeyPlan> plan_;
  // The sample whose fields are streaming.
  bool open_ = false;
  std::string open_key_;
  uint32_t open_label_ = kNoLabel;
  // Keys held in memory until complete: their fields so far, in arrival order.
  std::unordered_map<std::string, std::vector<std::pair<std::string, std::vector<std::byte>>>>
      buffered_;
  std::vector<std::string> buffered_order_;
};

}  // namespace

Status ImportTar(const std::string& source, PackContext& ctx) {
  struct stat st;
  if (::stat(source.c_str(), &st) != 0) return Status::FromErrno(errno, source);
  std::vector<std::string> shards;
  if (S_ISDIR(st.st_mode)) {
    DIR* d = ::opendir(source.c_str());
    if (d == nullptr) return Status::FromErrno(errno, source);
    while (dirent* e = ::readdir(d)) {
      const std::string_view name = e->d_name;
      if (name.find(".tar") != name.npos || name.ends_with(".tgz")) {
        shards.push_back(source + "/" + e->d_name);
      }
    }
    ::closedir(d);
    std::sort(shards.begin(), shards.end());
    if (shards.empty()) return Status::InvalidArgument(source + ": no tar shards in it");
  } else {
    shards.push_back(source);
  }
  ctx.CountSourceBytes(shards);
  return TarImport(shards, ctx).Run();
}

}  // namespace dlfs::pack_internal
