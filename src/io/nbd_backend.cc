// NBD backend: reads targets named by NBD URIs with libnbd's asynchronous
// API, driven from the engine's own thread (no helper threads): Submit
// issues nbd_aio_pread straight into the loader's buffers (libnbd receives
// the payload into them, no copy), and Reap polls the connections' sockets
// and feeds libnbd's state machines until reads complete.
//
// Each NBD target has `connections` handles (when the server advertises
// multi-conn); a read goes to the one with the fewest in flight. Local
// targets of the same volume are served by a pread pool whose completions
// wake the same poll() through an eventfd, so one Reap waits on both.
//
// Failure handling, per read:
//   server error (NBD_EIO, ...)  the read completes with that errno;
//   connection lost              the reads in flight on it are re-issued on
//                                a new connection (bounded: NbdOptions::
//                                reconnects per read and per outage);
//   no reply within timeout      the connection is closed — so the late
//                                reply can never land in a reused buffer —
//                                and treated as lost.
// When reconnecting fails, the reads fail with the connection's errno and
// the target is left alone for timeout_seconds (reads fail at once), so a
// dead server costs one bounded wait, not one per sample.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <thread>

#include "common/clock.h"
#include "io/io_backend.h"
#include "nbd/nbd_client.h"

#ifdef DLFS_HAVE_NBD
#include <libnbd.h>
#endif

namespace dlfs::io_internal {

#ifdef DLFS_HAVE_NBD

namespace {

bool IsConnectionErrno(int e) {
  return e == ENOTCONN || e == ECONNRESET || e == EPIPE || e == ESHUTDOWN || e == ECONNABORTED ||
         e == ECONNREFUSED || e == ETIMEDOUT || e == ENOENT;
}

class NbdBackend final : public Backend {
 public:
  NbdBackend(const Targets& targets, const EngineOptions& options)
      : targets_(targets), options_(options.nbd) {
    capacity_ = std::clamp<uint32_t>(options.queue_depth, 1, 4096);
  }

  ~NbdBackend() override {
    for (Remote& r : remotes_) {
      for (Conn& c : r.conns) Close(c);
    }
    for (auto& rec : recs_) delete rec;
  }

  Status Init(std::unique_ptr<Backend> local) {
    local_ = std::move(local);
    remotes_.resize(targets_.paths.size());
    for (uint32_t t = 0; t < targets_.paths.size(); ++t) {
      if (!targets_.remote[t]) continue;
      Remote& r = remotes_[t];
      r.uri = targets_.paths[t];
      DLFS_ASSIGN_OR_RETURN(std::unique_ptr<nbd::Connection> first,
                            nbd::Connection::Open(r.uri, options_.timeout_seconds));
      r.size = first->size();
      r.max_request = first->max_request();
      uint32_t n = std::max<uint32_t>(1, options_.connections);
      if (n > 1 && !first->multi_conn()) {
        note_ = "1 connection per target: " + r.uri + " does not advertise multi-conn";
        n = 1;
      }
      r.conns.resize(n);
      // The handle of the probe connection is kept as connection 0.
      r.conns[0].h = first->Release();
      for (uint32_t c = 1; c < n; ++c) {
        Status st;
        r.conns[c].h = nbd::ConnectHandle(r.uri, options_.timeout_seconds, &st);
        if (r.conns[c].h == nullptr) return st;
      }
      ++remote_count_;
      connections_ = n;
    }
    if (local_ != nullptr) {
      notify_fd_ = local_->NotifyFd();
      if (notify_fd_ < 0)
        return Status::InvalidArgument("local backend of an NBD engine cannot notify");
    }
    return Status::Ok();
  }

  uint32_t capacity() const override { return capacity_; }

  void Prepare(const Op& op) override { prepared_.push_back(op); }

  Status Submit() override {
    bool local = false;
    for (const Op& op : prepared_) {
      if (!targets_.remote[op.target]) {
        local_->Prepare(op);
        ++local_in_flight_;
        local = true;
        continue;
      }
      Rec* rec = NewRec(op);
      Start(rec);
    }
    prepared_.clear();
    if (local) DLFS_RETURN_IF_ERROR(local_->Submit());
    return Status::Ok();
  }

  Status Reap(std::vector<Completion>* out) override {
    DLFS_RETURN_IF_ERROR(Submit());
    const size_t first = out->size();
    while (true) {
      DLFS_RETURN_IF_ERROR(Collect(out));
      if (out->size() > first) return Status::Ok();
      if (remote_in_flight_ == 0) {
        if (local_in_flight_ == 0) return Status::Ok();  // nothing to wait for
        DLFS_RETURN_IF_ERROR(local_->Reap(out));
        local_in_flight_ -= static_cast<uint32_t>(out->size() - first);
        return Status::Ok();
      }
      DLFS_RETURN_IF_ERROR(WaitOnce());
    }
  }

  Status Poll(std::vector<Completion>* out) override {
    // Take what the sockets already hold without blocking.
    if (remote_in_flight_ > 0) DLFS_RETURN_IF_ERROR(PollSockets(0));
    return Collect(out);
  }

  bool RegisterBuffer(uint32_t, std::span<std::byte>) override { return false; }

  std::string Describe() const override {
    std::string s = "NBD (libnbd), " + std::to_string(remote_count_) + " remote target" +
                    (remote_count_ == 1 ? "" : "s") + " × " + std::to_string(connections_) +
                    " connection" + (connections_ == 1 ? "" : "s") + ", queue depth " +
                    std::to_string(capacity_);
    char t[64];
    std::snprintf(t, sizeof t, ", timeout %g s, %u reconnects", options_.timeout_seconds,
                  options_.reconnects);
    s += t;
    if (!note_.empty()) s += " (" + note_ + ")";
    if (local_ != nullptr) s += "; local targets: " + local_->Describe();
    return s;
  }

 private:
  struct Conn {
    nbd_handle* h = nullptr;
    uint32_t in_flight = 0;
  };
  struct Remote {
    std::string uri;
    uint64_t size = 0;
    uint64_t max_request = nbd::kMaxRequest;
    std::vector<Conn> conns;
    double down_until = 0;  // reconnecting failed: reads fail at once until then
    int down_errno = ENOTCONN;
  };
  struct Rec {
    NbdBackend* self;
    Op op;
    uint32_t conn = 0;
    double start = 0;
    uint32_t attempts = 0;  // connections lost under this read
    int err = 0;            // as the completion callback reported
    bool issued = false;    // handed to libnbd, no callback seen yet
  };

  static int OnComplete(void* user_data, int* error) {
    Rec* rec = static_cast<Rec*>(user_data);
    if (!rec->issued) return 1;  // its connection was abandoned
    rec->issued = false;
    rec->err = *error;
    rec->self->raw_.push_back(rec);
    return 1;
  }

  Rec* NewRec(const Op& op) {
    Rec* rec;
    if (!free_recs_.empty()) {
      rec = free_recs_.back();
      free_recs_.pop_back();
      *rec = Rec{this, op};
    } else {
      rec = new Rec{this, op};
      recs_.push_back(rec);
    }
    return rec;
  }

  void Complete(Rec* rec, int64_t result) {
    done_.push_back(Completion{rec->op.tag, result});
    free_recs_.push_back(rec);
  }

  void Close(Conn& c) {
    if (c.h != nullptr) nbd_close(c.h);
    c.h = nullptr;
    c.in_flight = 0;
  }

  // Issues `rec` on the target's least busy live connection, reconnecting
  // first when none is live; completes it with an error when that fails.
  void Start(Rec* rec) {
    Remote& r = remotes_[rec->op.target];
    while (true) {
      Conn* best = nullptr;
      uint32_t best_i = 0;
      for (uint32_t i = 0; i < r.conns.size(); ++i) {
        Conn& c = r.conns[i];
        if (c.h != nullptr && (best == nullptr || c.in_flight < best->in_flight)) {
          best = &c;
          best_i = i;
        }
      }
      if (best == nullptr) {
        const int err = Reconnect(r);
        if (err != 0) return Complete(rec, -err);
        continue;
      }
      const uint64_t len = std::min<uint64_t>(rec->op.length, r.max_request);
      rec->conn = best_i;
      rec->start = Now();
      rec->issued = true;
      const int64_t cookie = nbd_aio_pread(best->h, rec->op.buffer, len, rec->op.offset,
                                           nbd_completion_callback{OnComplete, rec, nullptr}, 0);
      if (cookie != -1) {
        rec->op.length = static_cast<uint32_t>(len);  // the rest comes back as a short read
        ++best->in_flight;
        ++remote_in_flight_;
        return;
      }
      rec->issued = false;
      const int err = nbd_get_errno() != 0 ? nbd_get_errno() : EIO;
      if (nbd_aio_is_dead(best->h) != 1 && nbd_aio_is_closed(best->h) != 1) {
        return Complete(rec, -err);  // refused by libnbd itself (bounds, size)
      }
      Lost(r, best_i, err);
      if (++rec->attempts > options_.reconnects) return Complete(rec, -err);
    }
  }

  // Connects the target's dead connections; 0, or the errno of the last
  // attempt when none could be made.
  int Reconnect(Remote& r) {
    if (Now() < r.down_until) return r.down_errno;
    int err = ENOTCONN;
    for (uint32_t attempt = 0; attempt < std::max<uint32_t>(1, options_.reconnects); ++attempt) {
      if (attempt > 0) {
        std::this_thread::sleep_for(
            std::chrono::duration<double>(options_.reconnect_delay_seconds));
      }
      bool any = false;
      for (Conn& c : r.conns) {
        if (c.h != nullptr) continue;
        Status st;
        c.h = nbd::ConnectHandle(r.uri, options_.timeout_seconds, &st);
        if (c.h != nullptr && nbd_get_size(c.h) != static_cast<int64_t>(r.size)) {
          // Not the export the volume was opened on (the server came back
          // serving something else): never read from it.
          Close(c);
          st = Status::IOError(r.uri + ": export size changed across a reconnect", ESTALE);
        }
        if (c.h == nullptr) {
          // The read failed because its connection was lost and could not
          // be made again: ENOTCONN says so better than the socket's own
          // ENOENT or ECONNREFUSED; a handshake that hung stays ETIMEDOUT.
          err = st.sys_errno() == ETIMEDOUT ? ETIMEDOUT : ENOTCONN;
        } else {
          any = true;
        }
      }
      if (any) return 0;
    }
    r.down_until = Now() + options_.timeout_seconds;
    r.down_errno = err;
    return err;
  }

  // Connection `ci` of `r` is gone (or is being given up): closes it and
  // re-issues the reads it carried, each within its retry budget.
  void Lost(Remote& r, uint32_t ci, int err) {
    std::vector<Rec*> orphans;
    auto on_conn = [&](const Rec* rec) {
      return &remotes_[rec->op.target] == &r && rec->conn == ci;
    };
    // Reads whose callback already came: a success stands; an error may be
    // libnbd aborting the command because the connection died.
    for (Rec*& rec : raw_) {
      if (rec == nullptr || !on_conn(rec)) continue;
      if (rec->err == 0) {
        Complete(rec, rec->op.length);
      } else {
        orphans.push_back(rec);
      }
      rec = nullptr;
      --remote_in_flight_;
    }
    for (Rec* rec : recs_) {
      if (rec->issued && on_conn(rec)) {
        rec->issued = false;  // a callback fired while closing is ignored
        orphans.push_back(rec);
        --remote_in_flight_;
      }
    }
    Close(r.conns[ci]);
    for (Rec* rec : orphans) {
      if (++rec->attempts > options_.reconnects) {
        Complete(rec, -err);
      } else {
        Start(rec);
      }
    }
  }

  // Turns callback reports into completions, and takes the local ones.
  Status Collect(std::vector<Completion>* out) {
    std::vector<Rec*> raw;
    raw.swap(raw_);
    for (Rec* rec : raw) {
      if (rec == nullptr) continue;
      Remote& r = remotes_[rec->op.target];
      Conn& c = r.conns[rec->conn];
      if (c.in_flight > 0) --c.in_flight;
      --remote_in_flight_;
      Complete(rec, rec->err != 0 ? -int64_t{rec->err} : int64_t{rec->op.length});
    }
    out->insert(out->end(), done_.begin(), done_.end());
    done_.clear();
    if (local_in_flight_ > 0) {
      const size_t before = out->size();
      DLFS_RETURN_IF_ERROR(local_->Poll(out));
      local_in_flight_ -= static_cast<uint32_t>(out->size() - before);
    }
    return Status::Ok();
  }

  // One poll() over every busy connection (and the local pool's eventfd),
  // bounded by the oldest read's deadline; then timeouts.
  Status WaitOnce() {
    double oldest = Now();
    for (Rec* rec : recs_) {
      if (rec->issued) oldest = std::min(oldest, rec->start);
    }
    const double left = oldest + options_.timeout_seconds - Now();
    const int ms = left <= 0 ? 0 : static_cast<int>(std::min(std::ceil(left * 1e3), 1e9));
    DLFS_RETURN_IF_ERROR(PollSockets(ms));
    CheckTimeouts();
    return Status::Ok();
  }

  Status PollSockets(int ms) {
    fds_.clear();
    where_.clear();
    for (uint32_t t = 0; t < remotes_.size(); ++t) {
      for (uint32_t i = 0; i < remotes_[t].conns.size(); ++i) {
        Conn& c = remotes_[t].conns[i];
        if (c.h == nullptr) continue;
        const unsigned dir = nbd_aio_get_direction(c.h);
        short events = 0;
        if (dir & LIBNBD_AIO_DIRECTION_READ) events |= POLLIN;
        if (dir & LIBNBD_AIO_DIRECTION_WRITE) events |= POLLOUT;
        if (events == 0) continue;
        fds_.push_back(pollfd{nbd_aio_get_fd(c.h), events, 0});
        where_.push_back({t, i});
      }
    }
    const bool local = local_in_flight_ > 0;
    if (local) fds_.push_back(pollfd{notify_fd_, POLLIN, 0});
    const int n = ::poll(fds_.data(), fds_.size(), ms);
    if (n < 0) {
      if (errno == EINTR) return Status::Ok();
      return Status::FromErrno(errno, "poll on NBD connections");
    }
    for (size_t k = 0; k < where_.size(); ++k) {
      const short re = fds_[k].revents;
      if (re == 0) continue;
      Remote& r = remotes_[where_[k].first];
      Conn& c = r.conns[where_[k].second];
      if (c.h == nullptr) continue;  // closed while handling an earlier one
      int rc = 0;
      if (re & (POLLIN | POLLHUP)) {
        rc = nbd_aio_notify_read(c.h);
      } else if (re & POLLOUT) {
        rc = nbd_aio_notify_write(c.h);
      } else if (re & POLLERR) {
        rc = -1;
      }
      if (rc == -1 || nbd_aio_is_dead(c.h) == 1 || nbd_aio_is_closed(c.h) == 1) {
        const int err = nbd_get_errno() != 0 ? nbd_get_errno() : ECONNRESET;
        Lost(r, where_[k].second, IsConnectionErrno(err) ? err : ECONNRESET);
      }
    }
    if (local && (fds_.back().revents & POLLIN)) {
      uint64_t v;
      (void)!::read(notify_fd_, &v, sizeof v);
    }
    return Status::Ok();
  }

  void CheckTimeouts() {
    const double now = Now();
    for (Remote& r : remotes_) {
      for (uint32_t i = 0; i < r.conns.size(); ++i) {
        if (r.conns[i].h == nullptr || r.conns[i].in_flight == 0) continue;
        bool late = false;
        for (Rec* rec : recs_) {
          late = late || (rec->issued && &remotes_[rec->op.target] == &r && rec->conn == i &&
                          now - rec->start >= options_.timeout_seconds);
        }
        if (late) Lost(r, i, ETIMEDOUT);
      }
    }
  }

  const Targets& targets_;
  NbdOptions options_;
  uint32_t capacity_ = 1;
  uint32_t connections_ = 1;
  uint32_t remote_count_ = 0;
  std::string note_;
  std::unique_ptr<Backend> local_;
  int notify_fd_ = -1;
  uint32_t local_in_flight_ = 0;
  uint32_t remote_in_flight_ = 0;
  std::vector<Remote> remotes_;  // by target id; empty for local targets
  std::vector<Rec*> recs_;       // every record ever made (owned)
  std::vector<Rec*> free_recs_;
  std::vector<Rec*> raw_;  // reported by callbacks, not yet collected
  std::vector<Op> prepared_;
  std::vector<Completion> done_;
  std::vector<pollfd> fds_;
  std::vector<std::pair<uint32_t, uint32_t>> where_;  // fds_[k] is remotes_[first].conns[second]
};

}  // namespace

Result<std::unique_ptr<Backend>> CreateNbdBackend(const Targets& targets,
                                                  const EngineOptions& options,
                                                  std::unique_ptr<Backend> local) {
  auto b = std::make_unique<NbdBackend>(targets, options);
  DLFS_RETURN_IF_ERROR(b->Init(std::move(local)));
  return std::unique_ptr<Backend>(std::move(b));
}

#else  // !DLFS_HAVE_NBD

Result<std::unique_ptr<Backend>> CreateNbdBackend(const Targets& targets, const EngineOptions&,
                                                  std::unique_ptr<Backend>) {
  for (size_t t = 0; t < targets.paths.size(); ++t) {
    if (targets.remote[t]) {
      return Status::Unavailable(targets.paths[t] + ": this dlfs was built without libnbd");
    }
  }
  return Status::InvalidArgument("no NBD target");
}

#endif

}  // namespace dlfs::io_internal
