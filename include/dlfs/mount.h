// MountVolume: a read-only FUSE view of a volume (`dlfs mount`).
//
// The volume's tree appears as directories and files with their exact sizes,
// so code that only knows paths (torchvision.datasets.ImageFolder, shell
// tools) works unchanged. Any write is refused with EROFS. A sample of up to
// 64 MiB is read whole and its CRC32C verified when it is opened, then served
// from memory; a damaged sample fails with EIO (and a message on stderr)
// instead of returning wrong bytes. Larger samples are read through as asked,
// unverified.
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
};

// Mounts `volume` at `mountpoint` and serves it until unmounted
// (`fusermount3 -u MOUNTPOINT`, or SIGINT/SIGTERM in the foreground).
// Returns when the file system is unmounted; an error if mounting failed.
Status MountVolume(std::shared_ptr<Volume> volume, const std::string& mountpoint,
                   const MountOptions& options);

}  // namespace dlfs
