#include "lmdbio/mdb_cursor.h"

#include <sys/stat.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

#include "dlfs/lmdb.h"

namespace dlfs::lmdbio {

namespace {

Status MdbError(int rc, const std::string& path, const char* what) {
  if (rc == ENOENT) return Status::NotFound(path + ": " + what + ": " + mdb_strerror(rc));
  return Status::IOError(path + ": " + what + ": " + mdb_strerror(rc));
}

// Where liblmdb mapped `file` in this process. liblmdb does not export its
// map address (MDB_envinfo.me_mapaddr is the fixed-map hint, usually null;
// LMDBIO patched liblmdb for this), so it is read from /proc/self/maps:
// liblmdb maps the whole file once, from offset 0.
Result<const std::byte*> FindMapping(const std::string& file) {
  char real[PATH_MAX];
  if (::realpath(file.c_str(), real) == nullptr) return Status::FromErrno(errno, file);
  std::FILE* maps = std::fopen("/proc/self/maps", "re");
  if (maps == nullptr) return Status::FromErrno(errno, "/proc/self/maps");
  char line[PATH_MAX + 256];
  const std::string suffix = std::string(" ") + real + "\n";
  uintptr_t found = 0;
  while (std::fgets(line, sizeof line, maps) != nullptr) {
    const std::string_view l(line);
    if (l.size() < suffix.size() || l.substr(l.size() - suffix.size()) != suffix) continue;
    unsigned long start = 0, end = 0, offset = 0;
    if (std::sscanf(line, "%lx-%lx %*s %lx", &start, &end, &offset) == 3 && offset == 0) {
      found = start;
      break;
    }
  }
  std::fclose(maps);
  if (found == 0) return Status::NotFound(file + ": liblmdb's mapping is not in /proc/self/maps");
  return reinterpret_cast<const std::byte*>(found);
}

}  // namespace

Result<std::unique_ptr<MdbCursor>> MdbCursor::Open(const std::string& path, bool walk_only) {
  auto c = std::unique_ptr<MdbCursor>(new MdbCursor(path));
  int rc = mdb_env_create(&c->env_);
  if (rc != 0) return MdbError(rc, path, "mdb_env_create");
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Status::FromErrno(errno, path);
  // Caffe opens read-only without thread-local slots; no lock file, so a
  // read-only directory works and ranks do not contend on the lock.
  const unsigned flags = MDB_RDONLY | MDB_NOTLS | MDB_NOLOCK |
                         (S_ISDIR(st.st_mode) ? 0 : MDB_NOSUBDIR) | (walk_only ? MDB_NORDAHEAD : 0);
  if ((rc = mdb_env_open(c->env_, path.c_str(), flags, 0)) != 0)
    return MdbError(rc, path, "mdb_env_open");
  if ((rc = mdb_txn_begin(c->env_, nullptr, MDB_RDONLY, &c->txn_)) != 0)
    return MdbError(rc, path, "mdb_txn_begin");
  if ((rc = mdb_dbi_open(c->txn_, nullptr, 0, &c->dbi_)) != 0)
    return MdbError(rc, path, "mdb_dbi_open");
  if ((rc = mdb_cursor_open(c->txn_, c->dbi_, &c->cursor_)) != 0)
    return MdbError(rc, path, "mdb_cursor_open");
  MDB_stat stat;
  if ((rc = mdb_stat(c->txn_, c->dbi_, &stat)) != 0) return MdbError(rc, path, "mdb_stat");
  c->entries_ = stat.ms_entries;
  MDB_envinfo info;
  mdb_env_info(c->env_, &info);
  c->map_size_ = (info.me_last_pgno + 1) * uint64_t{stat.ms_psize};
  DLFS_ASSIGN_OR_RETURN(c->map_, FindMapping(LmdbDataFile(path)));
  if (c->entries_ == 0) return Status::InvalidArgument(path + ": the database has no records");
  DLFS_RETURN_IF_ERROR(c->Get(MDB_FIRST));
  return c;
}

MdbCursor::~MdbCursor() {
  if (cursor_) mdb_cursor_close(cursor_);
  if (txn_) mdb_txn_abort(txn_);
  if (env_) mdb_env_close(env_);
}

Status MdbCursor::Step() {
  const int rc = mdb_cursor_get(cursor_, &key_, &value_, MDB_NEXT);
  if (rc == MDB_NOTFOUND) return Get(MDB_FIRST);
  return rc == 0 ? Status::Ok() : MdbError(rc, path_, "mdb_cursor_get(MDB_NEXT)");
}

Status MdbCursor::Seek(std::string_view key) {
  key_ = MDB_val{key.size(), const_cast<char*>(key.data())};
  const int rc = mdb_cursor_get(cursor_, &key_, &value_, MDB_SET_KEY);
  return rc == 0 ? Status::Ok() : MdbError(rc, path_, "mdb_cursor_get(MDB_SET_KEY)");
}

Status MdbCursor::Get(MDB_cursor_op op) {
  const int rc = mdb_cursor_get(cursor_, &key_, &value_, op);
  return rc == 0 ? Status::Ok() : MdbError(rc, path_, "mdb_cursor_get");
}

}  // namespace dlfs::lmdbio
