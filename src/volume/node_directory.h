// A node's one copy of a volume's directory region, shared by every process
// of the user that opens the volume with DirectorySharing::kNode (the ranks
// of a job, their DataLoader workers, other jobs): a region in /dev/shm
// ($DLFS_CACHE_DIR) following the rules of src/common/shm_region.h.
//
// Region "dlfs-<uid>-<volume uuid>-dir<node name>": a 4 KiB header (magic
// "DLFSND01", version, the volume's uuid, the directory's length and
// CRC32C) and the directory region's bytes, page-aligned, exactly as stored
// in target 0. A region whose header does not match the volume's superblock
// is refused. The bytes themselves are trusted no more than bytes read from
// storage: Volume::Open checks them in full (checksum and every entry) in
// each process, unless the process's own job wrote them (the MPI collective
// open). The directory is read-only once published; readers map it
// read-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "dlfs/status.h"

namespace dlfs::volume_internal {

// What names a node copy and what it must agree with.
struct NodeDirectoryKey {
  std::string uuid;       // the volume's, 8-4-4-4-12
  uint64_t bytes = 0;     // the directory region's length
  uint32_t crc32c = 0;    // and checksum, from target 0's superblock
  std::string node_name;  // fake nodes of one host: "-node1"; "" otherwise
  std::string dir;        // where regions live ("": shm::RegionDir's default)
};

// A node copy mapped read-only into this process; `bytes` keeps the
// mapping and the process's hold on the region alive.
struct NodeDirectory {
  std::shared_ptr<const std::byte> bytes;
  std::string path;      // the region's file
  bool created = false;  // published by this call (PublishNodeDirectory)
};

// The region's file name for `key` (no directory).
std::string NodeDirectoryName(const NodeDirectoryKey& key);

// The node's copy when one exists and its header matches `key`; nullopt
// when there is none. InvalidArgument naming the region and the reason
// when one exists but is refused; IOError for a system error.
Result<std::optional<NodeDirectory>> AttachNodeDirectory(const NodeDirectoryKey& key);

// Publishes a node copy whose directory bytes fill(dst) writes (key.bytes
// of them); when another process published one first, attaches that one
// instead. fill is not called when the region cannot be made (no room in
// /dev/shm, no such directory): the error says why.
Result<NodeDirectory> PublishNodeDirectory(const NodeDirectoryKey& key,
                                           const std::function<Status(std::byte* dst)>& fill);

// The node's copy: attached when it exists; otherwise, holding the node's
// build lock for it, attached if another process made it meanwhile, or
// read with fill and published. So the first process of a node reads the
// directory from storage and the others wait for it rather than read it too.
Result<NodeDirectory> GetNodeDirectory(const NodeDirectoryKey& key,
                                       const std::function<Status(std::byte* dst)>& fill);

}  // namespace dlfs::volume_internal
