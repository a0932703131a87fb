// Writes LMDB databases with liblmdb for the tests, the way Caffe's tools do:
// keys "%08llu_img.jpg", one write transaction per `per_txn` puts.
#pragma once

#include <gtest/gtest.h>
#include <lmdb.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#define MDB_OK(expr)                                                 \
  do {                                                               \
    const int mdb_rc_ = (expr);                                      \
    ASSERT_EQ(mdb_rc_, 0) << #expr << ": " << mdb_strerror(mdb_rc_); \
  } while (0)

namespace dlfs::testing {

class LmdbWriter {
 public:
  ~LmdbWriter() { Close(); }

  // Creates (or opens) the environment in directory `dir` and its main
  // database (or the named sub-database `name`) with `db_flags`.
  void Open(const std::string& dir, unsigned db_flags = 0, const char* name = nullptr) {
    MDB_OK(mdb_env_create(&env_));
    MDB_OK(mdb_env_set_mapsize(env_, size_t{4} << 30));
    MDB_OK(mdb_env_set_maxdbs(env_, 4));
    MDB_OK(mdb_env_open(env_, dir.c_str(), 0, 0644));
    MDB_txn* txn;
    MDB_OK(mdb_txn_begin(env_, nullptr, 0, &txn));
    MDB_OK(mdb_dbi_open(txn, name, db_flags | MDB_CREATE, &dbi_));
    MDB_OK(mdb_txn_commit(txn));
  }

  // Flushes and closes the environment (idempotent).
  void Close() {
    if (env_ == nullptr) return;
    mdb_env_sync(env_, 1);
    mdb_env_close(env_);
    env_ = nullptr;
  }

  static std::string Key(uint64_t i) {
    char b[32];
    std::snprintf(b, sizeof b, "%08llu_img.jpg", static_cast<unsigned long long>(i));
    return b;
  }

  // Puts `keys` with values from `value_of`, committing every `per_txn`.
  void Put(const std::vector<uint64_t>& keys, const std::function<std::string(uint64_t)>& value_of,
           size_t per_txn = 1000) {
    MDB_txn* txn = nullptr;
    for (size_t n = 0; n < keys.size(); ++n) {
      if (!txn) MDB_OK(mdb_txn_begin(env_, nullptr, 0, &txn));
      const std::string k = Key(keys[n]), v = value_of(keys[n]);
      MDB_val key{k.size(), const_cast<char*>(k.data())},
          val{v.size(), const_cast<char*>(v.data())};
      MDB_OK(mdb_put(txn, dbi_, &key, &val, 0));
      if ((n + 1) % per_txn == 0) {
        MDB_OK(mdb_txn_commit(txn));
        txn = nullptr;
      }
    }
    if (txn) MDB_OK(mdb_txn_commit(txn));
  }

  void Delete(const std::vector<uint64_t>& keys) {
    MDB_txn* txn;
    MDB_OK(mdb_txn_begin(env_, nullptr, 0, &txn));
    for (uint64_t i : keys) {
      const std::string k = Key(i);
      MDB_val key{k.size(), const_cast<char*>(k.data())};
      MDB_OK(mdb_del(txn, dbi_, &key, nullptr));
    }
    MDB_OK(mdb_txn_commit(txn));
  }

  MDB_env* env() const { return env_; }
  MDB_dbi dbi() const { return dbi_; }

 private:
  MDB_env* env_ = nullptr;
  MDB_dbi dbi_ = 0;
};

inline std::vector<uint64_t> Range(uint64_t n) {
  std::vector<uint64_t> v(n);
  for (uint64_t i = 0; i < n; ++i) v[i] = i;
  return v;
}

}  // namespace dlfs::testing
