#include "nbd/nbd_client.h"

#include <pwd.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>

#include "common/clock.h"

#ifdef DLFS_HAVE_NBD
#include <libnbd.h>
#endif

namespace dlfs {

bool IsNbdUri(std::string_view path) {
  // libnbd's schemes: nbd, nbds, nbd+unix, nbds+unix, nbd+vsock, nbds+vsock.
  const size_t colon = path.find("://");
  if (colon == path.npos) return false;
  const std::string_view scheme = path.substr(0, colon);
  return scheme == "nbd" || scheme == "nbds" || scheme.starts_with("nbd+") ||
         scheme.starts_with("nbds+");
}

#ifdef DLFS_HAVE_NBD
bool NbdSupported() { return true; }
#else
bool NbdSupported() { return false; }
#endif

namespace nbd {

#ifdef DLFS_HAVE_NBD

namespace {

int MillisLeft(double deadline) {
  const double left = deadline - Now();
  if (left <= 0) return 0;
  return static_cast<int>(std::min(std::ceil(left * 1e3), 1e9));
}

}  // namespace

Status LastError(const std::string& what) {
  const int err = nbd_get_errno();
  const char* msg = nbd_get_error();
  std::string text = what + ": " + (msg != nullptr ? msg : "NBD error");
  if (err == EINVAL && msg != nullptr && std::strstr(msg, "uri") != nullptr) {
    return Status::InvalidArgument(text);
  }
  return Status::IOError(text, err != 0 ? err : EIO);
}

nbd_handle* ConnectHandle(const std::string& uri, double timeout_seconds, Status* error) {
  nbd_handle* h = nbd_create();
  if (h == nullptr) {
    *error = LastError(uri);
    return nullptr;
  }
  // tls-psk-file=... in the URI names a local file: allowed, it is how a
  // pre-shared key reaches libnbd (docs/deploy.md).
  nbd_set_uri_allow_local_file(h, true);
  // TLS-PSK's identity when the URI names none (nbds://alice@host/...):
  // this user's name, as libnbd would take from getlogin_r(3) — which fails
  // without a login session (services, containers).
  if (const passwd* pw = ::getpwuid(::geteuid()); pw != nullptr && pw->pw_name != nullptr) {
    nbd_set_tls_username(h, pw->pw_name);
  }
  const double deadline = Now() + timeout_seconds;
  if (nbd_aio_connect_uri(h, uri.c_str()) == -1) {
    *error = LastError(uri);
    nbd_close(h);
    return nullptr;
  }
  while (nbd_aio_is_ready(h) != 1) {
    if (nbd_aio_is_dead(h) == 1 || nbd_aio_is_closed(h) == 1) {
      *error = LastError(uri);
      nbd_close(h);
      return nullptr;
    }
    const int ms = MillisLeft(deadline);
    if (ms == 0) {
      *error = Status::IOError(
          uri + ": no answer to the NBD handshake within " + std::to_string(timeout_seconds) + " s",
          ETIMEDOUT);
      nbd_close(h);
      return nullptr;
    }
    if (nbd_poll(h, ms) == -1) {
      *error = LastError(uri);
      nbd_close(h);
      return nullptr;
    }
  }
  return h;
}

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& uri, double timeout_seconds,
                                                     bool writable) {
  std::unique_ptr<Connection> c(new Connection());
  c->uri_ = uri;
  c->timeout_ = timeout_seconds;
  c->writable_ = writable;
  Status st;
  c->h_ = ConnectHandle(uri, timeout_seconds, &st);
  if (c->h_ == nullptr) return st;
  const int64_t size = nbd_get_size(c->h_);
  if (size < 0) return LastError(uri);
  c->size_ = static_cast<uint64_t>(size);
  c->multi_conn_ = nbd_can_multi_conn(c->h_) == 1;
  c->can_flush_ = nbd_can_flush(c->h_) == 1;
  const int64_t max = nbd_get_block_size(c->h_, LIBNBD_SIZE_MAXIMUM);
  if (max > 0) c->max_request_ = std::min<uint64_t>(kMaxRequest, static_cast<uint64_t>(max));
  if (writable && nbd_is_read_only(c->h_) == 1) {
    return Status::IOError(uri + ": the export is read-only (served with nbdkit -r?)", EROFS);
  }
  return c;
}

Connection::~Connection() {
  if (h_ != nullptr) nbd_close(h_);
}

void Connection::Close() {
  std::lock_guard lock(mu_);
  closed_ = true;
  if (h_ != nullptr) nbd_close(h_);
  h_ = nullptr;
}

Status Connection::Reconnect() {
  if (closed_) return Status::InvalidArgument(uri_ + ": connection closed");
  if (h_ != nullptr) nbd_close(h_);
  Status st;
  h_ = ConnectHandle(uri_, timeout_, &st);
  if (h_ == nullptr) return st;
  const int64_t size = nbd_get_size(h_);
  if (size < 0 || static_cast<uint64_t>(size) != size_) {
    nbd_close(h_);
    h_ = nullptr;
    return Status::IOError(uri_ + ": after reconnecting, the export has " + std::to_string(size) +
                               " bytes, not " + std::to_string(size_) + " — another export?",
                           EIO);
  }
  return Status::Ok();
}

Status Connection::Run(const std::function<int64_t(nbd_handle*)>& start, const std::string& what) {
  // Two tries: a connection found dead (the server restarted since the last
  // command) is replaced once and the command issued again.
  for (int attempt = 0;; ++attempt) {
    if (h_ == nullptr || nbd_aio_is_ready(h_) != 1) DLFS_RETURN_IF_ERROR(Reconnect());
    Status st = Complete(start(h_), what);
    if (st.ok() || attempt > 0 || (h_ != nullptr && nbd_aio_is_dead(h_) != 1)) return st;
  }
}

Status Connection::Complete(int64_t cookie, const std::string& what) {
  if (cookie == -1) return LastError(what);
  const double deadline = Now() + timeout_;
  while (true) {
    const int done = nbd_aio_command_completed(h_, static_cast<uint64_t>(cookie));
    if (done == 1) return Status::Ok();
    if (done == -1) return LastError(what);
    const int ms = MillisLeft(deadline);
    if (ms == 0) {
      // Closing the connection is what guarantees the late answer cannot
      // land in a buffer the caller has reused.
      nbd_close(h_);
      h_ = nullptr;
      return Status::IOError(
          what + ": no answer from the NBD server within " + std::to_string(timeout_) + " s",
          ETIMEDOUT);
    }
    if (nbd_poll(h_, ms) == -1) return LastError(what);
  }
}

Status Connection::Read(void* buf, size_t n, uint64_t offset, const std::string& what) {
  std::lock_guard lock(mu_);
  auto* p = static_cast<char*>(buf);
  for (size_t at = 0; at < n;) {
    const size_t len = std::min<uint64_t>(n - at, max_request_);
    DLFS_RETURN_IF_ERROR(Run(
        [&](nbd_handle* h) {
          return nbd_aio_pread(h, p + at, len, offset + at, NBD_NULL_COMPLETION, 0);
        },
        what));
    at += len;
  }
  return Status::Ok();
}

Status Connection::Write(const void* buf, size_t n, uint64_t offset, const std::string& what) {
  std::lock_guard lock(mu_);
  const auto* p = static_cast<const char*>(buf);
  for (size_t at = 0; at < n;) {
    const size_t len = std::min<uint64_t>(n - at, max_request_);
    DLFS_RETURN_IF_ERROR(Run(
        [&](nbd_handle* h) {
          return nbd_aio_pwrite(h, p + at, len, offset + at, NBD_NULL_COMPLETION, 0);
        },
        what));
    at += len;
  }
  return Status::Ok();
}

Status Connection::Flush(const std::string& what) {
  std::lock_guard lock(mu_);
  if (!can_flush_) return Status::Ok();
  return Run([](nbd_handle* h) { return nbd_aio_flush(h, NBD_NULL_COMPLETION, 0); }, what);
}

#else  // !DLFS_HAVE_NBD

Status LastError(const std::string& what) {
  return Status::Unavailable(what + ": this dlfs was built without libnbd");
}

nbd_handle* ConnectHandle(const std::string& uri, double, Status* error) {
  *error = LastError(uri);
  return nullptr;
}

Result<std::unique_ptr<Connection>> Connection::Open(const std::string& uri, double, bool) {
  return LastError(uri);
}

Connection::~Connection() = default;
void Connection::Close() {}
Status Connection::Read(void*, size_t, uint64_t, const std::string& what) {
  return LastError(what);
}
Status Connection::Write(const void*, size_t, uint64_t, const std::string& what) {
  return LastError(what);
}
Status Connection::Flush(const std::string& what) { return LastError(what); }

#endif

}  // namespace nbd
}  // namespace dlfs
