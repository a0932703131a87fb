// RepairSuperblock: restores one target's damaged superblock from its
// intact twin (`dlfs repair`, dlfs/verify.h).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "dlfs/verify.h"
#include "format/superblock.h"

namespace dlfs {
namespace {

Status ReadAt(int fd, format::Superblock* sb, uint64_t offset, const std::string& path) {
  return PreadFull(fd, sb, sizeof *sb, offset, path);
}

}  // namespace

Result<SuperblockRepair> RepairSuperblock(const std::string& path, bool dry_run) {
  const int fd = ::open(path.c_str(), (dry_run ? O_RDONLY : O_RDWR) | O_CLOEXEC);
  if (fd < 0) return Status::FromErrno(errno, path);
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st;
  if (::fstat(fd, &st) != 0) return Status::FromErrno(errno, path);
  if (!S_ISREG(st.st_mode)) {
    return Status::NotSupported(path +
                                ": repairs a volume file; a block device target's superblock "
                                "copy sits at the volume's size, which only the primary records");
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  constexpr uint64_t kSb = format::kSuperblockSize;
  if (size < 2 * kSb) {
    return Status::Corruption(path + ": not a dlfs volume (" + std::to_string(size) +
                              " bytes is too small to hold one)");
  }
  format::Superblock primary, copy;
  DLFS_RETURN_IF_ERROR(ReadAt(fd, &primary, 0, path));
  DLFS_RETURN_IF_ERROR(ReadAt(fd, &copy, size - kSb, path));
  const Status p = format::CheckSuperblock(primary, size, path + " (primary superblock)");
  const Status c = format::CheckSuperblock(copy, size, path + " (superblock copy at the end)");
  SuperblockRepair out;
  const format::Superblock* from = nullptr;
  uint64_t to = 0;
  if (p.ok() && c.ok() && std::memcmp(&primary, &copy, sizeof copy) == 0) {
    out.what = path + ": both superblocks are intact; nothing to repair";
    return out;
  }
  if (p.ok()) {
    // An intact primary is what Volume::Open used: the copy follows it.
    from = &primary;
    to = size - kSb;
    out.what = "the superblock copy at the end of the file from the primary (" +
               (c.ok() ? std::string("it differed") : c.message()) + ")";
  } else if (c.ok()) {
    from = &copy;
    to = 0;
    out.what =
        "the primary superblock from the intact copy at the end of the file (" + p.message() + ")";
  } else {
    return Status::Corruption(p.message() + "; " + c.message() +
                              ": both superblocks are damaged, nothing to repair from");
  }
  out.what = path + (dry_run ? ": would rewrite " : ": rewrote ") + out.what;
  out.offset = to;
  if (dry_run) return out;
  DLFS_RETURN_IF_ERROR(PwriteFull(fd, from, sizeof *from, to, path));
  if (::fsync(fd) != 0) return Status::FromErrno(errno, path + ": fsync");
  out.repaired = true;
  return out;
}

}  // namespace dlfs
