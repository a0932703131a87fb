// SummarizeLmdb: `dlfs lmdb info`'s facts about a database.
#include <fcntl.h>

#include <algorithm>
#include <vector>

#include "common/file_util.h"
#include "dlfs/lmdb.h"

namespace dlfs {

Result<LmdbSummary> SummarizeLmdb(const std::string& path) {
  DLFS_ASSIGN_OR_RETURN(const LmdbRecordMap map, LmdbRecordMap::Build(path));
  LmdbSummary s;
  s.path = map.path();
  s.stats = map.stats();
  if (map.size() == 0) return s;
  s.value_min = ~uint64_t{0};
  for (uint64_t i = 0; i < map.size(); ++i) {
    s.value_min = std::min(s.value_min, map.value_length(i));
    s.value_max = std::max(s.value_max, map.value_length(i));
    s.value_bytes += map.value_length(i);
  }
  s.value_mean = static_cast<double>(s.value_bytes) / map.size();
  s.first_key = map.key(0);
  s.last_key = map.key(map.size() - 1);

  // Is it Caffe's format? Look at the first record.
  std::vector<std::byte> first(map.value_length(0));
  ScopedFd fd(::open(map.path().c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return Status::FromErrno(errno, map.path());
  DLFS_RETURN_IF_ERROR(
      PreadFull(fd.get(), first.data(), first.size(), map.value_offset(0), map.path()));
  if (auto d = ParseDatum(first); d.ok()) {
    s.first_datum = DatumShape{.channels = d->channels,
                               .height = d->height,
                               .width = d->width,
                               .label = d->label,
                               .has_label = d->has_label,
                               .encoded = d->encoded,
                               .data_bytes = d->data.size()};
  }
  return s;
}

}  // namespace dlfs
