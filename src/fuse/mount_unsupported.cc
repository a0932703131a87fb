// Stand-in used when dlfs is built without libfuse3.
#include "dlfs/mount.h"

namespace dlfs {

const bool kMountSupported = false;

Status MountVolume(std::shared_ptr<Volume>, const std::string&, const MountOptions&) {
  return Status::NotSupported(
      "this dlfs was built without FUSE support (install libfuse3-dev "
      "and rebuild)");
}

}  // namespace dlfs
