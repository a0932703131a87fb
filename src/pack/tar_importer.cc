// Tar importer: WebDataset-style shards, read with libarchive (plain or
// compressed tar). Members of one key are adjacent in a shard, as WebDataset
// writes them; the importer holds one key group in memory at a time.
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <memory>
#include <vector>

#include "format/format.h"
#include "pack/importer.h"

namespace dlfs::pack_internal {

namespace {

constexpr int64_t kMaxMemberBytes = 0xFFFFFFFFll;

struct Member {
  std::string path;  // member path inside the shard, without a leading "./"
  std::vector<std::byte> data;
};

// WebDataset's key: the member path up to the first '.' of its file name.
std::string_view KeyOf(std::string_view path) {
  const size_t slash = path.rfind('/');
  const size_t start = slash == path.npos ? 0 : slash + 1;
  const size_t dot = path.find('.', start);
  return dot == path.npos ? path : path.substr(0, dot);
}

std::string_view ExtensionOf(std::string_view path) {
  return path.substr(KeyOf(path).size());  // ".jpg", ".seg.png", "" ...
}

class ShardReader {
 public:
  ShardReader(const std::string& shard, PackContext& ctx) : shard_(shard), ctx_(ctx) {}

  Status Run() {
    ctx_.BeginSource(shard_);  // progress, and a duplicate path names both shards
    std::unique_ptr<archive, int (*)(archive*)> a(archive_read_new(), archive_read_free);
    archive_read_support_filter_all(a.get());
    archive_read_support_format_tar(a.get());
    if (archive_read_open_filename(a.get(), shard_.c_str(), 1 << 20) != ARCHIVE_OK) {
      return ctx_.Unreadable(shard_, Error(a.get()));
    }
    archive_entry* entry = nullptr;
    while (true) {
      const int r = archive_read_next_header(a.get(), &entry);
      if (r == ARCHIVE_EOF) break;
      if (r < ARCHIVE_WARN) return ctx_.Unreadable(shard_, Error(a.get()));
      if (archive_entry_filetype(entry) != AE_IFREG) continue;
      std::string path = archive_entry_pathname(entry) ? archive_entry_pathname(entry) : "";
      while (path.starts_with("./")) path.erase(0, 2);
      if (path.empty()) continue;
      const int64_t size = archive_entry_size(entry);
      if (size < 0 || size > kMaxMemberBytes) {
        return Status::InvalidArgument(shard_ + ": member '" + path + "' is too large");
      }
      if (!group_.empty() && KeyOf(group_.front().path) != KeyOf(path)) {
        DLFS_RETURN_IF_ERROR(FlushGroup());
      }
      Member m{std::move(path), std::vector<std::byte>(static_cast<size_t>(size))};
      int64_t got = 0;
      while (got < size) {  // archive_read_data may return less than asked
        const la_ssize_t n = archive_read_data(a.get(), m.data.data() + got, m.data.size() - got);
        if (n <= 0) {
          if (n < 0) got = -1;
          break;
        }
        got += n;
      }
      if (got != size) {
        Status err = got < 0
                         ? Error(a.get())
                         : Status::Corruption(shard_ + ": member '" + m.path + "' is truncated");
        group_.clear();  // the partial key group is dropped with the shard's tail
        return ctx_.Unreadable(shard_, err.WithContext("member '" + m.path + "'"));
      }
      group_.push_back(std::move(m));
    }
    return FlushGroup();
  }

 private:
  Status Error(archive* a) const {
    const char* msg = archive_error_string(a);
    const int err = archive_errno(a);
    return Status(err == ENOENT ? StatusCode::kNotFound : StatusCode::kIOError,
                  shard_ + ": " + (msg ? msg : "unreadable tar archive"), err);
  }

  Status FlushGroup() {
    uint32_t label = kNoLabel;
    for (const Member& m : group_) {
      if (ExtensionOf(m.path) != ".cls") continue;
      std::string_view text(reinterpret_cast<const char*>(m.data.data()), m.data.size());
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
        text.remove_suffix(1);
      while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
        text.remove_prefix(1);
      uint64_t v = 0;
      auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
      if (ec != std::errc() || end != text.data() + text.size() || v >= format::kNone - 1) {
        return Status::InvalidArgument(shard_ + ": member '" + m.path +
                                       "' is not a class number: '" +
                                       std::string(text.substr(0, 40)) + "'");
      }
      label = static_cast<uint32_t>(v);
    }
    for (const Member& m : group_) {
      if (ExtensionOf(m.path) == ".cls") continue;
      DLFS_RETURN_IF_ERROR(ctx_.builder().Add(m.path, m.data, label).WithContext(shard_));
      DLFS_RETURN_IF_ERROR(ctx_.Tick());
    }
    group_.clear();
    return Status::Ok();
  }

  const std::string& shard_;
  PackContext& ctx_;
  std::vector<Member> group_;
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
  for (const std::string& shard : shards) {
    DLFS_RETURN_IF_ERROR(ShardReader(shard, ctx).Run());
  }
  return Status::Ok();
}

}  // namespace dlfs::pack_internal
