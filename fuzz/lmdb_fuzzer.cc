// Fuzzes the data.mdb parser (LmdbRecordMap) and the Caffe Datum decoder:
// the input is a data.mdb file; every record the map lists must lie inside
// the file, and each value is decoded as a Datum (as `pack --from lmdb`
// does). The input itself is also decoded as a Datum.
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "dlfs/lmdb.h"
#include "fuzz_util.h"

using namespace dlfs;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static fuzz::MemFile file("data.mdb");
  (void)ParseDatum({reinterpret_cast<const std::byte*>(data), size});
  file.Set(data, size);
  for (const bool check_overflow : {true, false}) {
    LmdbMapOptions options;
    options.check_overflow_headers = check_overflow;
    auto map = LmdbRecordMap::Build(file.path(), options);
    if (!map.ok()) continue;
    std::vector<std::byte> value;
    for (uint64_t i = 0; i < map->size(); ++i) {
      const uint64_t at = map->value_offset(i), len = map->value_length(i);
      if (at > size || len > size - at) fuzz::Broken("record outside the file");
      if (i > 0 && !(map->key(i - 1) < map->key(i))) fuzz::Broken("keys out of order");
      if (i >= 1000) continue;
      value.assign(reinterpret_cast<const std::byte*>(data) + at,
                   reinterpret_cast<const std::byte*>(data) + at + len);
      if (map->in_overflow(i)) {
        const std::span<const std::byte> header(
            reinterpret_cast<const std::byte*>(data) + at - LmdbRecordMap::kOverflowHeader,
            LmdbRecordMap::kOverflowHeader);
        (void)CheckLmdbOverflowHeader(header, at, len, map->stats().page_size, map->path());
      }
      auto datum = ParseDatum(value);
      if (datum.ok() && !datum->data.empty() &&
          (datum->data.data() < value.data() ||
           datum->data.data() + datum->data.size() > value.data() + value.size())) {
        fuzz::Broken("Datum data outside the value");
      }
    }
  }
  return 0;
}
