// Tar shards as WebDataset sees them: members, their keys, and which members
// share a key across a set of shards. The tar importer packs from it; a
// multi-field importer (several members of one key as one sample) can group
// by the same rule with TarKeyIndex.
//
// Nothing here sizes memory by what a header claims: member data is read in
// caller-sized pieces, and a declared size larger than what an uncompressed
// archive can hold is refused at the header.
//
// Thread safety: none; one reader or index per thread.
#pragma once

#include <archive.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "dlfs/status.h"

namespace dlfs::pack_internal {

// WebDataset's key: the member path up to the first '.' of its file name
// ("s/000.seg.png" -> "s/000").
std::string_view WebDatasetKey(std::string_view path);
// The rest of the path after the key: ".seg.png", ".cls", "" ...
std::string_view WebDatasetExtension(std::string_view path);

enum class TarMemberType { kFile, kHardLink, kDirectory, kSymlink, kOther };

struct TarMember {
  uint32_t shard = 0;    // index of its shard in the list given to the index
  uint64_t ordinal = 0;  // position among all headers of its shard, from 0
  std::string path;      // as stored, leading "./" removed
  uint64_t size = 0;     // declared data bytes (0 for a hard link without data)
  TarMemberType type = TarMemberType::kFile;
  std::string link;  // kHardLink: the target's path, leading "./" removed
};

// What a member type is called in messages: "regular file", "hard link",
// "symbolic link", "FIFO", "character device", ...
std::string TarMemberTypeName(const TarMember& m);

// Refuses a member path that could not be stored as given: absolute, or
// with a ".." component. Message: "<shard>: member '<path>' ...".
Status CheckTarMemberPath(const std::string& shard, std::string_view path);

// Reads one shard (plain or compressed tar) member by member.
class TarShardReader {
 public:
  TarShardReader(std::string path, uint32_t shard_index);
  ~TarShardReader();
  TarShardReader(const TarShardReader&) = delete;
  TarShardReader& operator=(const TarShardReader&) = delete;

  const std::string& path() const { return path_; }

  // The next member's header into *m: true; false after the last member; or
  // an error naming the shard (unreadable, damaged, or a declared size the
  // uncompressed archive cannot hold). The data of the previous member is
  // skipped if it was not read.
  Result<bool> Next(TarMember* m);

  // Up to dst.size() bytes of the current member's data: the count read, 0
  // once its declared size was read, or an error naming the shard and the
  // member (IOError; Corruption when the archive ends inside it).
  Result<size_t> Read(std::span<std::byte> dst);

  // Positions the reader on member `ordinal` (reopening the shard when the
  // reader is already past it) and returns its header.
  Result<TarMember> SeekTo(uint64_t ordinal);

 private:
  Status Open();
  Status Error(const std::string& what = "") const;

  std::string path_;
  uint32_t shard_;
  std::unique_ptr<archive, int (*)(archive*)> a_;
  uint64_t file_size_ = 0;   // of the shard file
  bool compressed_ = false;  // a filter other than "none" is in use
  uint64_t next_ordinal_ = 0;
  TarMember current_;
  uint64_t data_read_ = 0;  // of current_
};

// Members of a set of shards grouped by key. Keys are per path inside the
// shards, so members of one key may sit anywhere: later in the same shard
// or in another shard.
class TarKeyIndex {
 public:
  // Reads the headers of every shard (no member data) and indexes every
  // member but directories. Errors name the shard.
  static Result<TarKeyIndex> Build(const std::vector<std::string>& shards);

  // Adds a member (in the order members are met); returns its id.
  uint32_t Add(TarMember member);

  const std::vector<TarMember>& members() const { return members_; }
  const TarMember& member(uint32_t id) const { return members_[id]; }
  // Keys in the order their first member was added.
  const std::vector<std::string>& keys() const { return keys_; }
  // Ids of the members with `key`, in the order they were added; empty for
  // an unknown key.
  std::span<const uint32_t> MembersOf(std::string_view key) const;

 private:
  std::vector<TarMember> members_;
  std::vector<std::string> keys_;
  std::unordered_map<std::string, std::vector<uint32_t>> by_key_;
};

}  // namespace dlfs::pack_internal
