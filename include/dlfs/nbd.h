// Targets on remote storage servers, read over the Network Block Device
// protocol with libnbd (docs/deploy.md, "Storage servers over NBD").
//
// A target is named by an NBD URI wherever a path is accepted: the volume's
// target table, VolumeOpenOptions::target_map (`--target-map`), the path
// given to Volume::Open, and VolumeBuilder's target paths (`--target-path`).
// The URI forms are libnbd's (nbd_connect_uri(3)):
//   nbd://HOST[:PORT]/EXPORT               TCP
//   nbd+unix:///EXPORT?socket=PATH         Unix domain socket
//   nbds://..., nbds+unix://...            the same over TLS; a pre-shared
//                                          key is given with
//                                          ?tls-psk-file=FILE&tls-username=NAME
// An export is checked like a file: its size and superblock (uuid, target
// index) must match the volume's table, so a wrong or too small export is
// refused naming the URI.
#pragma once

#include <cstdint>
#include <string_view>

namespace dlfs {

struct NbdOptions {
  // Connections per NBD target and engine. Reads are spread over them;
  // more than one is opened only when the server advertises multi-conn
  // (nbdkit does for its file plugin), else the engine says why not.
  uint32_t connections = 1;
  // A read (or connect) not answered within this many seconds fails with
  // ETIMEDOUT naming the URI; its connection is closed (so nothing can be
  // written into the buffer later) and reconnected. A stalled server never
  // hangs a job longer than about timeout × (1 + reconnects).
  double timeout_seconds = 30;
  // After a connection is lost (server restarted, killed, timed out) the
  // reads that were in flight on it are retried on a new connection; this
  // many connection attempts are made, reconnect_delay_seconds apart. When
  // all fail, the reads fail with the error naming the URI, and the target
  // is not tried again for timeout_seconds.
  uint32_t reconnects = 3;
  double reconnect_delay_seconds = 0.2;
};

// True when `path` is an NBD URI (nbd://, nbds://, nbd+unix://, ...),
// which libnbd reads, rather than a file or device name.
bool IsNbdUri(std::string_view path);

// True when this build has libnbd (otherwise an NBD target is Unavailable).
bool NbdSupported();

}  // namespace dlfs
