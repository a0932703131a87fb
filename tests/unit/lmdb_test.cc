// The direct data.mdb parser against liblmdb as the oracle.
#include <lmdb.h>

#include <filesystem>
#include <random>

#include "dlfs/lmdb.h"
#include "lmdb_writer.h"
#include "testutil.h"

namespace dlfs {
namespace lmdb_test {

using testing::LmdbWriter;
using testing::Range;
using testing::StatusIs;
using testing::TempDir;

class LmdbTest : public ::testing::Test {
 protected:
  void Open(unsigned db_flags = 0, const char* name = nullptr) {
    writer_.Open(tmp_.path(), db_flags, name);
    env_ = writer_.env();
    dbi_ = writer_.dbi();
  }
  static std::string Key(uint64_t i) { return LmdbWriter::Key(i); }
  void Put(const std::vector<uint64_t>& keys, const std::function<std::string(uint64_t)>& value_of,
           size_t per_txn = 1000) {
    writer_.Put(keys, value_of, per_txn);
  }
  void Delete(const std::vector<uint64_t>& keys) { writer_.Delete(keys); }
  void CloseDb() {
    writer_.Close();
    env_ = nullptr;
  }

  // The record map equals a liblmdb cursor walk: same keys in the same
  // order, and the bytes at each recorded offset are the value.
  void ExpectMatchesCursor() {
    mdb_env_sync(env_, 1);
    auto map = LmdbRecordMap::Build(tmp_.path());
    ASSERT_OK(map);
    const auto file = testing::ReadFile(tmp_ / "data.mdb");
    MDB_txn* txn;
    MDB_cursor* cur;
    MDB_OK(mdb_txn_begin(env_, nullptr, MDB_RDONLY, &txn));
    MDB_OK(mdb_cursor_open(txn, dbi_, &cur));
    MDB_val k, v;
    uint64_t i = 0;
    for (int rc = mdb_cursor_get(cur, &k, &v, MDB_FIRST); rc == 0;
         rc = mdb_cursor_get(cur, &k, &v, MDB_NEXT), ++i) {
      ASSERT_LT(i, map->size());
      ASSERT_EQ(map->key(i), std::string_view(static_cast<char*>(k.mv_data), k.mv_size));
      ASSERT_EQ(map->value_length(i), v.mv_size) << i;
      ASSERT_LE(map->value_offset(i) + v.mv_size, file.size());
      ASSERT_EQ(std::memcmp(file.data() + map->value_offset(i), v.mv_data, v.mv_size), 0) << i;
    }
    mdb_cursor_close(cur);
    MDB_stat st;
    mdb_stat(txn, dbi_, &st);
    mdb_txn_abort(txn);
    EXPECT_EQ(i, map->size());
    EXPECT_EQ(map->stats().entries, st.ms_entries);
    EXPECT_EQ(map->stats().depth, st.ms_depth);
    EXPECT_EQ(map->stats().branch_pages, st.ms_branch_pages);
    EXPECT_EQ(map->stats().leaf_pages, st.ms_leaf_pages);
    EXPECT_EQ(map->stats().overflow_pages, st.ms_overflow_pages);

    // Without reading overflow headers: the same map, and each header the
    // map points at passes the check a reader makes after reading it.
    LmdbMapOptions fast;
    fast.check_overflow_headers = false;
    auto lazy = LmdbRecordMap::Build(tmp_.path(), fast);
    ASSERT_OK(lazy);
    ASSERT_EQ(lazy->size(), map->size());
    EXPECT_EQ(lazy->stats().overflow_pages, st.ms_overflow_pages);
    for (uint64_t r = 0; r < map->size(); ++r) {
      ASSERT_EQ(lazy->value_offset(r), map->value_offset(r));
      if (!map->in_overflow(r)) continue;
      const std::span<const std::byte> header(
          file.data() + map->value_offset(r) - LmdbRecordMap::kOverflowHeader,
          LmdbRecordMap::kOverflowHeader);
      EXPECT_OK(CheckLmdbOverflowHeader(header, map->value_offset(r), map->value_length(r),
                                        map->stats().page_size, "db"));
      // One byte of the run length is enough to make the header wrong.
      std::vector<std::byte> bad(header.begin(), header.end());
      bad[12] = std::byte{0};
      bad[13] = std::byte{0};
      bad[14] = std::byte{0};
      bad[15] = std::byte{0};
      EXPECT_EQ(CheckLmdbOverflowHeader(bad, map->value_offset(r), map->value_length(r),
                                        map->stats().page_size, "db")
                    .code(),
                StatusCode::kCorruption);
    }
  }

  TempDir tmp_;
  LmdbWriter writer_;
  MDB_env* env_ = nullptr;  // writer_'s, for the oracle walks
  MDB_dbi dbi_ = 0;
};

std::string Bytes(uint64_t i, size_t n) {
  std::string s(n, '\0');
  for (size_t j = 0; j < n; ++j) s[j] = static_cast<char>((i * 131 + j * 7) & 0xff);
  return s;
}

TEST_F(LmdbTest, TinyValues) {
  Open();
  Put(Range(1000), [](uint64_t i) { return Bytes(i, 1 + i % 50); });
  ExpectMatchesCursor();
}

TEST_F(LmdbTest, OverflowValues) {
  Open();
  Put(
      Range(300), [](uint64_t i) { return Bytes(i, 2000 + (i * 7919) % 200000); }, 50);
  ExpectMatchesCursor();
}

TEST_F(LmdbTest, HundredThousandEntriesMultiLevel) {
  Open();
  Put(
      Range(100000), [](uint64_t i) { return Bytes(i, 16 + i % 64); }, 10000);
  ExpectMatchesCursor();
  auto map = LmdbRecordMap::Build(tmp_.path());
  ASSERT_OK(map);
  EXPECT_GE(map->stats().depth, 3u);
}

TEST_F(LmdbTest, RewrittenDatabaseWithFreePageReuse) {
  Open();
  Put(
      Range(3000), [](uint64_t i) { return Bytes(i, 3000 + i % 5000); }, 100);
  std::vector<uint64_t> gone;
  for (uint64_t i = 0; i < 3000; i += 3) gone.push_back(i);
  Delete(gone);
  // Rewrite the deleted ones with other sizes, plus new keys, in small
  // transactions so pages freed above are reused out of key order.
  Put(
      gone, [](uint64_t i) { return Bytes(i + 1, 100 + i % 9000); }, 37);
  std::vector<uint64_t> extra;
  for (uint64_t i = 3000; i < 4000; ++i) extra.push_back(i);
  Put(
      extra, [](uint64_t i) { return Bytes(i, 5000); }, 50);
  ExpectMatchesCursor();
  // The point of provenance: values are not laid out in key order here.
  auto map = LmdbRecordMap::Build(tmp_.path());
  ASSERT_OK(map);
  uint64_t backwards = 0;
  for (uint64_t i = 1; i < map->size(); ++i) {
    backwards += map->value_offset(i) < map->value_offset(i - 1);
  }
  EXPECT_GT(backwards, 0u);
}

TEST_F(LmdbTest, EmptyDatabase) {
  Open();
  ExpectMatchesCursor();
}

TEST_F(LmdbTest, DuplicateKeysAreRefused) {
  Open(MDB_DUPSORT);
  Put(Range(10), [](uint64_t i) { return Bytes(i, 10); });
  mdb_env_sync(env_, 1);
  auto map = LmdbRecordMap::Build(tmp_.path());
  ASSERT_THAT(map, StatusIs(StatusCode::kNotSupported,
                            "has flags 0x4 (duplicate keys or a custom key order)"));
}

TEST_F(LmdbTest, NamedSubDatabaseIsRefused) {
  Open(0, "images");
  Put(Range(10), [](uint64_t i) { return Bytes(i, 10); });
  mdb_env_sync(env_, 1);
  auto map = LmdbRecordMap::Build(tmp_.path());
  ASSERT_THAT(map, StatusIs(StatusCode::kNotSupported, "sub-databases"));
}

TEST_F(LmdbTest, TruncatedAndDamagedFilesGiveCleanErrors) {
  Open();
  Put(
      Range(600), [](uint64_t i) { return Bytes(i, 10 + (i % 17) * 300); }, 500);
  CloseDb();
  const std::string db = tmp_ / "data.mdb";
  const auto original = testing::ReadFile(db);
  for (uint64_t len : {uint64_t{0}, uint64_t{100}, uint64_t{4096}, uint64_t{8192},
                       original.size() / 2, original.size() - 4096}) {
    testing::WriteFile(db, std::span(original).first(len));
    auto map = LmdbRecordMap::Build(db);
    ASSERT_THAT(map, StatusIs(StatusCode::kCorruption, db + ": not a valid LMDB file"))
        << "truncated to " << len;
  }
  // Random damage: any outcome but a crash or an out-of-range record. A
  // sample of it (fuzz_lmdb, fuzz/, explores damage far more widely), half
  // of it aimed at page headers and node offsets (a page's first 64 bytes).
  std::mt19937 rng(1);
  const uint64_t pages = original.size() / 4096;
  for (int round = 0; round < 60; ++round) {
    auto bytes = original;
    for (int k = 0; k < 4; ++k) {
      const uint64_t at = k % 2 == 0 ? rng() % bytes.size() : (rng() % pages) * 4096 + rng() % 64;
      bytes[at] ^= std::byte(1 + rng() % 255);
    }
    testing::WriteFile(db, bytes);
    auto map = LmdbRecordMap::Build(db);
    if (!map.ok()) continue;
    for (uint64_t i = 0; i < map->size(); ++i) {
      ASSERT_LE(map->value_offset(i) + map->value_length(i), bytes.size());
    }
  }
}

// Issue 13 #1: the meta page's entry count sized an allocation before
// anything checked it; 2^61 aborted with length_error, 2^36 with bad_alloc.
TEST_F(LmdbTest, EntryCountBeyondWhatTheFileHoldsIsRefused) {
  // The committed fuzz case: a 3-record database claiming 2^61 entries.
  const std::string fixture = std::string(DLFS_TEST_DATA) + "/hostile/lmdb-entries-2e61/data.mdb";
  auto map = LmdbRecordMap::Build(fixture);
  ASSERT_THAT(map, StatusIs(StatusCode::kCorruption,
                            fixture + ": not a valid LMDB file: the meta page's entry "
                                      "count (2305843009213693952)"));

  // The same edit on a larger database, at the sizes that failed, and just
  // past the bound; the true count still opens.
  Open();
  Put(Range(500), [](uint64_t i) { return Bytes(i, 20); });
  CloseDb();
  const std::string db = tmp_ / "data.mdb";
  const auto original = testing::ReadFile(db);
  const uint64_t pages = original.size() / 4096;
  const uint64_t bound = (pages - 2) * ((4096 - 16) / 10);
  for (uint64_t entries : {uint64_t{1} << 61, uint64_t{1} << 36, ~uint64_t{0}, bound + 1}) {
    auto bytes = original;
    for (uint64_t meta : {uint64_t{0}, uint64_t{4096}}) {
      std::memcpy(bytes.data() + meta + 16 + 72 + 32, &entries, 8);
    }
    testing::WriteFile(db, bytes);
    auto m = LmdbRecordMap::Build(db);
    ASSERT_THAT(m,
                StatusIs(StatusCode::kCorruption, "entry count (" + std::to_string(entries) + ")"))
        << entries;
  }
  testing::WriteFile(db, original);
  ASSERT_OK(LmdbRecordMap::Build(db));
}

TEST(DatumTest, DecodesCaffeWireFormat) {
  // channels=3 height=2 width=1 data="abcdef" label=7, then unpacked float_data
  // twice and encoded=true, in a non-canonical field order.
  const unsigned char wire[] = {0x08, 0x03, 0x10, 0x02, 0x18, 0x01, 0x22, 0x06, 'a', 'b',
                                'c',  'd',  'e',  'f',  0x28, 0x07, 0x35, 0,    0,   0x80,
                                0x3f, 0x35, 0,    0,    0,    0x40, 0x38, 0x01};
  auto d = ParseDatum({reinterpret_cast<const std::byte*>(wire), sizeof wire});
  ASSERT_OK(d);
  EXPECT_EQ(d->channels, 3);
  EXPECT_EQ(d->height, 2);
  EXPECT_EQ(d->width, 1);
  EXPECT_EQ(d->label, 7);
  EXPECT_TRUE(d->has_label);
  EXPECT_TRUE(d->encoded);
  EXPECT_EQ(d->float_count, 2u);
  EXPECT_EQ(std::string_view(reinterpret_cast<const char*>(d->data.data()), d->data.size()),
            "abcdef");
  // Truncations are errors, never reads past the end.
  for (size_t n = 1; n < sizeof wire; ++n) {
    auto t = ParseDatum({reinterpret_cast<const std::byte*>(wire), n});
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), StatusCode::kCorruption);
    }
  }
  const unsigned char bad[] = {0x22, 0x10, 'x'};
  EXPECT_THAT(
      ParseDatum({reinterpret_cast<const std::byte*>(bad), sizeof bad}),
      StatusIs(StatusCode::kCorruption, "malformed Caffe Datum: field 4 runs past the end"));
}

}  // namespace lmdb_test
}  // namespace dlfs
