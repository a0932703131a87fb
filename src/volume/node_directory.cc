#include "volume/node_directory.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "common/shm_region.h"

namespace dlfs::volume_internal {

namespace {

constexpr char kMagic[8] = {'D', 'L', 'F', 'S', 'N', 'D', '0', '1'};
constexpr uint32_t kVersion = 1;
constexpr uint64_t kHeaderBytes = 4096;

struct Header {
  char magic[8];
  uint32_t version;
  uint32_t header_bytes;
  char uuid[40];
  uint64_t directory_bytes;
  uint32_t directory_crc32c;
  uint32_t reserved;
};
static_assert(sizeof(Header) <= kHeaderBytes);

// The mapping and the region, released together when the last Volume
// using the directory goes.
struct Mapping {
  void* base = MAP_FAILED;
  uint64_t length = 0;
  shm::Region region;
  ~Mapping() {
    if (base != MAP_FAILED) ::munmap(base, length);
  }
};

// Maps `region` read-only, all of it at once: faulting in a large directory
// a page at a time costs each process one fault per 4 KiB (seconds for a
// 10M-sample directory on VMs with shadow paging).
Result<NodeDirectory> MapForReading(shm::Region region) {
  auto m = std::make_shared<Mapping>();
  m->length = region.bytes();
  m->base = ::mmap(nullptr, m->length, PROT_READ, MAP_SHARED, region.fd(), 0);
  if (m->base == MAP_FAILED) {
    const int e = errno;
    return Status::IOError(region.path() + ": mmap: " + std::strerror(e), e);
  }
#ifdef MADV_POPULATE_READ
  ::madvise(m->base, m->length, MADV_POPULATE_READ);  // best effort (Linux >= 5.14)
#endif
  NodeDirectory out;
  out.path = region.path();
  m->region = std::move(region);
  const auto* bytes = static_cast<const std::byte*>(m->base) + kHeaderBytes;
  out.bytes = std::shared_ptr<const std::byte>(m, bytes);
  return out;
}

// Why the header of an attached region does not fit `key`, or "".
std::string CheckHeader(const Header& h, const NodeDirectoryKey& key, uint64_t file_bytes) {
  if (std::memcmp(h.magic, kMagic, sizeof kMagic) != 0 || h.version != kVersion ||
      h.header_bytes != kHeaderBytes) {
    return "not a dlfs directory region of this version";
  }
  if (std::string(h.uuid, strnlen(h.uuid, sizeof h.uuid)) != key.uuid) {
    return "made for another volume";
  }
  if (h.directory_bytes != key.bytes || h.directory_crc32c != key.crc32c) {
    return "holds another directory than the volume's superblock describes";
  }
  if (file_bytes != kHeaderBytes + key.bytes) return "its size does not match its header";
  return "";
}

}  // namespace

std::string NodeDirectoryName(const NodeDirectoryKey& key) {
  return shm::UserPrefix() + key.uuid + "-dir" + key.node_name;
}

Result<std::optional<NodeDirectory>> AttachNodeDirectory(const NodeDirectoryKey& key) {
  const std::string dir = shm::RegionDir(key.dir);
  DLFS_ASSIGN_OR_RETURN(std::optional<shm::Region> found,
                        shm::Attach(dir, NodeDirectoryName(key), kHeaderBytes));
  if (!found) return std::optional<NodeDirectory>();
  Header h{};
  if (::pread(found->fd(), &h, sizeof h, 0) != static_cast<ssize_t>(sizeof h)) {
    return Status::InvalidArgument(found->path() + ": refused (cannot read its header)");
  }
  if (std::string why = CheckHeader(h, key, found->bytes()); !why.empty()) {
    return Status::InvalidArgument(found->path() + ": refused (" + why + ")");
  }
  DLFS_ASSIGN_OR_RETURN(NodeDirectory mapped, MapForReading(std::move(*found)));
  return std::optional<NodeDirectory>(std::move(mapped));
}

Result<NodeDirectory> PublishNodeDirectory(const NodeDirectoryKey& key,
                                           const std::function<Status(std::byte* dst)>& fill) {
  const std::string dir = shm::RegionDir(key.dir);
  shm::SweepStale(dir);
  const uint64_t file_bytes = kHeaderBytes + key.bytes;
  auto made = shm::Create(dir, NodeDirectoryName(key), file_bytes, file_bytes, [&](int fd) {
    void* p = ::mmap(nullptr, file_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int e = errno;
      return Status::IOError(dir + ": mmap: " + std::strerror(e), e);
    }
    auto* base = static_cast<std::byte*>(p);
    Status st = fill(base + kHeaderBytes);
    if (st.ok()) {
      Header h{};
      std::memcpy(h.magic, kMagic, sizeof kMagic);
      h.version = kVersion;
      h.header_bytes = kHeaderBytes;
      std::snprintf(h.uuid, sizeof h.uuid, "%s", key.uuid.c_str());
      h.directory_bytes = key.bytes;
      h.directory_crc32c = key.crc32c;
      std::memcpy(base, &h, sizeof h);
    }
    ::munmap(p, file_bytes);
    return st;
  });
  if (made.ok()) {
    DLFS_ASSIGN_OR_RETURN(NodeDirectory mine, MapForReading(std::move(*made)));
    mine.created = true;
    return mine;
  }
  if (made.status().code() != StatusCode::kAlreadyExists) return made.status();
  DLFS_ASSIGN_OR_RETURN(std::optional<NodeDirectory> theirs, AttachNodeDirectory(key));
  if (!theirs) {
    return Status::IOError(dir + "/" + NodeDirectoryName(key) +
                           ": published by another process and gone again");
  }
  return std::move(*theirs);
}

Result<NodeDirectory> GetNodeDirectory(const NodeDirectoryKey& key,
                                       const std::function<Status(std::byte* dst)>& fill) {
  const std::string dir = shm::RegionDir(key.dir);
  shm::SweepStale(dir);  // a copy a killed job left is not attached, but made anew
  DLFS_ASSIGN_OR_RETURN(std::optional<NodeDirectory> found, AttachNodeDirectory(key));
  if (found) return std::move(*found);
  std::optional<Result<NodeDirectory>> out;
  const Status locked = shm::WithBuildLock(dir, NodeDirectoryName(key), [&]() -> Status {
    auto again = AttachNodeDirectory(key);
    if (!again.ok()) {
      out.emplace(again.status());
    } else if (*again) {
      out.emplace(std::move(**again));
    } else {
      out.emplace(PublishNodeDirectory(key, fill));
    }
    return Status::Ok();
  });
  if (!locked.ok()) return locked;
  return std::move(*out);
}

}  // namespace dlfs::volume_internal
