// Internal: one libnbd connection to an NBD export, with deadlines.
//
// Connection wraps an nbd_handle: connecting (bounded by a timeout, so a
// stalled server cannot hang Open), the export's properties, and
// synchronous reads, writes and flushes for the simple paths (Volume::Open
// and ReadInto, verify, the builder). The I/O engine's NBD backend
// (src/io/nbd_backend.cc) uses handle() for libnbd's asynchronous API and
// drives it from its own completion loop.
//
// Thread safety: the synchronous methods lock, so a Volume may call them
// from many threads; handle() is for one thread that owns the connection.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "dlfs/nbd.h"
#include "dlfs/status.h"

struct nbd_handle;

namespace dlfs::nbd {

// Largest read or write sent as one NBD command (libnbd refuses more than
// 64 MiB; servers may advertise less, which is then used).
constexpr uint64_t kMaxRequest = 32u << 20;

class Connection {
 public:
  // Connects to `uri` and negotiates, within timeout_seconds. Errors name
  // the URI: Unavailable when the build has no libnbd, IOError with the
  // errno when the server cannot be reached or refuses (TLS included),
  // InvalidArgument for a malformed URI, and, with `writable`, IOError when
  // the export is read-only.
  static Result<std::unique_ptr<Connection>> Open(const std::string& uri, double timeout_seconds,
                                                  bool writable = false);
  ~Connection();
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  const std::string& uri() const { return uri_; }
  uint64_t size() const { return size_; }
  bool multi_conn() const { return multi_conn_; }
  uint64_t max_request() const { return max_request_; }
  nbd_handle* handle() const { return h_; }
  // Hands the handle over to the caller (who nbd_close()s it); the
  // Connection is unusable after.
  nbd_handle* Release() {
    nbd_handle* h = h_;
    h_ = nullptr;
    return h;
  }

  // Exactly n bytes at `offset`, or an error naming `what` (the URI and
  // more); reconnects once if the connection was lost. n may exceed
  // max_request() (split here).
  Status Read(void* buf, size_t n, uint64_t offset, const std::string& what);
  Status Write(const void* buf, size_t n, uint64_t offset, const std::string& what);
  // Closes the connection once no command runs on it; every later call
  // fails (no reconnect). Any thread.
  void Close();
  // Asks the server to make every write stable (a no-op for a server that
  // cannot flush, which says its writes are stable already).
  Status Flush(const std::string& what);

 private:
  Connection() = default;
  Status Reconnect();
  // Runs one command (`start` issues it, returning its cookie) to completion.
  Status Run(const std::function<int64_t(nbd_handle*)>& start, const std::string& what);
  // Waits for command `cookie` (-1: it could not be issued).
  Status Complete(int64_t cookie, const std::string& what);

  std::string uri_;
  double timeout_ = 30;
  bool writable_ = false;
  bool closed_ = false;
  nbd_handle* h_ = nullptr;
  uint64_t size_ = 0;
  bool multi_conn_ = false;
  bool can_flush_ = false;
  uint64_t max_request_ = kMaxRequest;
  std::mutex mu_;  // the synchronous methods
};

// Connects `uri` on a fresh handle within `timeout_seconds`: the handle, or
// nullptr and *error set (naming the URI).
nbd_handle* ConnectHandle(const std::string& uri, double timeout_seconds, Status* error);

// The last libnbd error of this thread as a Status naming `what`.
Status LastError(const std::string& what);

}  // namespace dlfs::nbd
