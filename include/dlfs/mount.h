// MountVolume: a read-only FUSE view of a volume (`dlfs mount`).
//
// The volume's tree appears as directories and files with their exact sizes,
// so code that only knows paths (torchvision.datasets.ImageFolder, shell
// tools) works unchanged. Any write is refused with EROFS.
//
// Files are fields (docs/format.md §4.8.5): field FIELD of sample KEY is the
// file KEY.FIELD in KEY's directory, exactly the member names of the tar
// shards a volume was packed from (`train/000123.jpg`, `.cls`, ...); the
// unnamed field, and so every sample of a volume without fields, is the file
// KEY. A file's size is its field's decoded length and reads return the
// decoded bytes. Where a name could denote two files (sample `a.b` with
// field `c` and sample `a` with field `b.c`, which a tar never produces),
// the listing shows both and a lookup finds the one with the shortest KEY.
//
// No byte is served before its field's CRC32C checked out (for a volume
// without fields: its sample's). A compressed field is read, checked and
// decoded whole on its first read and served from memory; so is a raw one
// of up to whole_sample_limit bytes. Files that take several reads are kept
// for the next ones, until the read that reaches their end, in a cache of at
// most 64 files and 128 MiB shared by the mount (the file just read always
// stays, however large). A larger raw field is first read
// through once in chunks, computing its checksum (once per mount), and then
// spliced from the volume file. A damaged field fails with EIO (and a
// message on stderr naming the volume, the sample and the field) instead of
// returning wrong bytes.
//
// Speed: the kernel may cache entries, attributes and file contents for as
// long as the mount lives (the volume is immutable), reads are up to 1 MiB,
// directory listings carry attributes (READDIRPLUS), and up to 16 threads
// serve requests, each on its own /dev/fuse descriptor.
//
// Memory: MountVolume limits glibc malloc to one arena for the whole process
// (mallopt M_ARENA_MAX), so that its worker threads do not each keep a
// high-water mark of freed memory; the RSS then stays flat over any number of
// reads (docs/reliability.md, promise 8).
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
  // Raw fields (samples) up to this size are verified and served from
  // memory; larger ones are verified by a streaming pass and read through
  // (see above). Compressed fields are always decoded into memory.
  uint64_t whole_sample_limit = 64 << 20;
};

// Mounts `volume` at `mountpoint` (an existing empty directory, relative
// paths resolved now) and serves it until unmounted (`fusermount3 -u
// MOUNTPOINT`, or SIGINT/SIGTERM in the foreground). Returns when the file
// system is unmounted; an error if mounting failed, InvalidArgument naming
// `mountpoint` when it is not a directory or not empty.
Status MountVolume(std::shared_ptr<Volume> volume, const std::string& mountpoint,
                   const MountOptions& options);

}  // namespace dlfs
