// LMDB importer: records of an existing (Caffe) LMDB, read through the
// direct data.mdb parser — no liblmdb, no mmap.
#include <fcntl.h>

#include <cerrno>

#include "common/file_util.h"
#include "dlfs/lmdb.h"
#include "pack/importer.h"

namespace dlfs::pack_internal {

namespace {

bool ValidComponent(std::string_view k) {
  return !k.empty() && k != "." && k != ".." && k.size() <= 0xFFFF && k.find('/') == k.npos &&
         k.find('\0') == k.npos;
}

}  // namespace

Status ImportLmdb(const std::string& source, PackContext& ctx) {
  DLFS_ASSIGN_OR_RETURN(LmdbRecordMap map, LmdbRecordMap::Build(source));
  ctx.set_total_samples(map.size());
  // Sample names are the keys when every key is a valid file name (Caffe's
  // "00000042_n01440764/x.JPEG" keys are not), else the record index.
  bool keys_as_names = true;
  for (uint64_t i = 0; i < map.size() && keys_as_names; ++i) {
    keys_as_names = ValidComponent(map.key(i));
  }
  const int width = static_cast<int>(std::to_string(map.size() ? map.size() - 1 : 0).size());
  ScopedFd fd(::open(map.path().c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, map.path());
  std::vector<std::byte> value;
  for (uint64_t i = 0; i < map.size(); ++i) {
    value.resize(map.value_length(i));
    DLFS_RETURN_IF_ERROR(
        PreadFull(fd.get(), value.data(), value.size(), map.value_offset(i), map.path()));
    uint32_t label = kNoLabel;
    std::span<const std::byte> stored = value;
    auto datum = ParseDatum(value);
    if (datum.ok()) {
      if (datum->has_label && datum->label >= 0) label = static_cast<uint32_t>(datum->label);
      if (ctx.options().lmdb_payload_only) stored = datum->data;
    } else if (ctx.options().lmdb_payload_only) {
      return datum.status().WithContext(map.path() + ": record " + std::to_string(i) + " (key '" +
                                        std::string(map.key(i)) + "')");
    }
    std::string name;
    if (keys_as_names) {
      name = map.key(i);
    } else {
      name = std::to_string(i);
      name.insert(0, width - std::min<int>(width, name.size()), '0');
    }
    DLFS_RETURN_IF_ERROR(ctx.builder().Add(name, stored, label));
    DLFS_RETURN_IF_ERROR(ctx.Tick());
  }
  return Status::Ok();
}

}  // namespace dlfs::pack_internal
