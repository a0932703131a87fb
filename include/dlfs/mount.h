// MountVolume: a read-only FUSE view of a volume (`dlfs mount`).
//
// The volume's tree appears as directories and files with their exact sizes,
// so code that only knows paths (torchvision.datasets.ImageFolder, shell
// tools) works unchanged. Any write is refused with EROFS.
//
// No byte is served before its sample's CRC32C checked out: a sample of up
// to whole_sample_limit bytes is read whole and verified on the first read
// of an open file, then served from memory; a larger one is first read
// through once in chunks, computing its checksum (once per mount), and then
// spliced from the volume file. A damaged sample fails with EIO (and a
// message on stderr naming it) instead of returning wrong bytes.
//
// Speed: the kernel may cache entries, attributes and file contents for as
// long as the mount lives (the volume is immutable), reads are up to 1 MiB,
// directory listings carry attributes (READDIRPLUS), and up to 16 threads
// serve requests, each on its own /dev/fuse descriptor.
//
// Available only when dlfs was built with libfuse3 (kMountSupported).
#pragma once

#include <memory>
#include <string>

#include "dlfs/status.h"
#include "dlfs/volume.h"

namespace dlfs {

extern const bool kMountSupported;

struct MountOptions {
  bool foreground = false;   // stay attached to the terminal (else daemonize once mounted)
  bool debug = false;        // libfuse debug output (implies foreground)
  bool allow_other = false;  // let other users read the mount (needs user_allow_other)
  // Samples up to this size are verified and served from memory; larger
  // ones are verified by a streaming pass and read through (see above).
  uint64_t whole_sample_limit = 64 << 20;
};

// Mounts `volume` at `mountpoint` and serves it until unmounted
// (`fusermount3 -u MOUNTPOINT`, or SIGINT/SIGTERM in the foreground).
// Returns when the file system is unmounted; an error if mounting failed.
Status MountVolume(std::shared_ptr<Volume> volume, const std::string& mountpoint,
                   const MountOptions& options);

}  // namespace dlfs
