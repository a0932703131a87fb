// S3 backend: reads targets named by s3:// URLs with ranged GETs, many at
// once on one curl multi handle driven from the engine's own thread (no
// helper threads) through curl's socket interface: an epoll set holds the
// sockets curl asks to watch, and only the transfers whose sockets are
// ready are moved (curl_multi_perform would poll every transfer's socket on
// every call: most of the CPU with 64 in flight). Each read is one GET of
// its range, received straight into the loader's buffer; connections are
// kept and reused (up to capacity() to the server). Every GET asks for the version the process
// pinned when it opened the object (If-Match), so a replaced object fails
// the read instead of mixing two versions.
//
// Failure handling, per read: 5xx, 429, a refused or broken connection and
// a timeout are retried after a backoff doubling from
// S3Options::retry_delay_seconds, at most S3Options::retries times, then
// fail with the last error; everything else (403, 404, 412, a short body)
// fails at once. Every failure names the URL and says what the server said.
//
// Local targets of the same volume are served by a pread pool whose
// eventfd joins curl's poll, as in the NBD backend.
#include <curl/curl.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <deque>
#include <unordered_map>
#include <unordered_set>

#include "common/clock.h"
#include "dlfs/s3.h"
#include "io/io_backend.h"
#include "s3/s3_client.h"

namespace dlfs::io_internal {

namespace {

class S3Backend final : public Backend {
 public:
  S3Backend(const Targets& targets, const EngineOptions& options)
      : targets_(targets), options_(s3::WithEnvironment(options.s3)) {
    capacity_ = std::clamp<uint32_t>(options.queue_depth, 1, 1024);
  }

  ~S3Backend() override {
    for (auto& t : transfers_) {
      if (t.added) curl_multi_remove_handle(multi_, t.request->easy());
    }
    transfers_.clear();  // before the multi handle they were added to
    if (multi_ != nullptr) curl_multi_cleanup(multi_);
    if (epoll_fd_ >= 0) ::close(epoll_fd_);
  }

  Status Init(std::unique_ptr<Backend> local) {
    local_ = std::move(local);
    if (local_ != nullptr) {
      notify_fd_ = local_->NotifyFd();
      if (notify_fd_ < 0)
        return Status::InvalidArgument("local backend of an S3 engine cannot notify");
    }
    DLFS_ASSIGN_OR_RETURN(config_, s3::LoadConfig());
    urls_.resize(targets_.paths.size());
    etags_.resize(targets_.paths.size());
    for (uint32_t t = 0; t < targets_.paths.size(); ++t) {
      if (!IsS3Url(targets_.paths[t])) continue;
      DLFS_ASSIGN_OR_RETURN(urls_[t], s3::ParseUrl(targets_.paths[t]));
      // The version the volume was opened at; an engine made without an
      // open volume reads the version there is now.
      etags_[t] = s3::Pinned(urls_[t].text);
      if (etags_[t].empty()) {
        DLFS_ASSIGN_OR_RETURN(const s3::ObjectInfo info, s3::Head(urls_[t], options_));
        etags_[t] = info.etag;
      }
    }
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    if (epoll_fd_ < 0) return Status::FromErrno(errno, "epoll_create1");
    if (notify_fd_ >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = notify_fd_;
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, notify_fd_, &ev) != 0) {
        return Status::FromErrno(errno, "epoll_ctl");
      }
    }
    multi_ = curl_multi_init();
    if (multi_ == nullptr) return Status::IOError("cannot create a curl multi handle");
    curl_multi_setopt(multi_, CURLMOPT_SOCKETFUNCTION, &S3Backend::OnSocket);
    curl_multi_setopt(multi_, CURLMOPT_SOCKETDATA, this);
    curl_multi_setopt(multi_, CURLMOPT_TIMERFUNCTION, &S3Backend::OnTimer);
    curl_multi_setopt(multi_, CURLMOPT_TIMERDATA, this);
    // Enough connections for every read in flight, and for the parts of one
    // large read (the fill's engine has one read in flight): parts queued
    // behind each other on one connection take a round trip each.
    const long connections = std::max(capacity_, kParts);
    curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, connections);
    curl_multi_setopt(multi_, CURLMOPT_MAXCONNECTS, connections);
    return Status::Ok();
  }

  uint32_t capacity() const override { return capacity_; }

  void Prepare(const Op& op) override {
    if (!IsS3Url(targets_.paths[op.target])) {
      local_->Prepare(op);
      ++local_in_flight_;
      local_prepared_ = true;
      return;
    }
    // A large read (the node cache's fill windows, verify) is fetched as
    // up to kParts parallel GETs of at least kMinPart bytes (at most
    // kMaxPart): one stream from the server is far slower than several, and
    // the fill reads one window at a time.
    const uint32_t part =
        std::clamp<uint32_t>((op.length + kParts - 1) / kParts, kMinPart, kMaxPart);
    const uint32_t parts = std::max<uint32_t>(1, (op.length + part - 1) / part);
    reads_[op.tag] = Read{parts, 0, 0, {}};
    for (uint32_t k = 0; k < parts; ++k) {
      const uint32_t i = NewTransfer();
      Transfer& t = transfers_[i];
      t.op = op;
      t.op.offset = op.offset + uint64_t{k} * part;
      t.op.length = std::min<uint32_t>(part, op.length - k * part);
      t.op.buffer = op.buffer + size_t{k} * part;
      t.attempts = 0;
      Start(i);
    }
  }

  Status Submit() override {
    if (local_prepared_) {
      local_prepared_ = false;
      DLFS_RETURN_IF_ERROR(local_->Submit());
    }
    return Drive();
  }

  Status Reap(std::vector<Completion>* out) override {
    const size_t first = out->size();
    for (;;) {
      DLFS_RETURN_IF_ERROR(Submit());
      DLFS_RETURN_IF_ERROR(Poll(out));
      if (out->size() > first || in_flight() == 0) return Status::Ok();
      // Wait for a socket, a local completion, curl's timer or the next
      // retry's time.
      double due = Now() + 1.0;
      if (timer_due_ >= 0) due = std::min(due, timer_due_);
      if (!retries_.empty()) due = std::min(due, retries_.front().first);
      const int wait_ms = std::clamp(static_cast<int>((due - Now()) * 1000) + 1, 0, 1000);
      DLFS_RETURN_IF_ERROR(Wait(wait_ms));
    }
  }

  Status Poll(std::vector<Completion>* out) override {
    DLFS_RETURN_IF_ERROR(Wait(0));
    int left = 0;
    while (CURLMsg* m = curl_multi_info_read(multi_, &left)) {
      if (m->msg != CURLMSG_DONE) continue;
      s3::Request* r = nullptr;
      curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, &r);
      const uint32_t i = index_of_.at(r);
      Transfer& t = transfers_[i];
      curl_multi_remove_handle(multi_, m->easy_handle);
      t.added = false;
      --running_;
      const s3::Outcome o = r->Finish(m->data.result);
      if (o.kind == s3::Outcome::kDone) {
        PartDone(t.op.tag, static_cast<int64_t>(r->bytes()), {}, out);
        free_.push_back(i);
      } else if (o.kind == s3::Outcome::kRetry && t.attempts < options_.retries) {
        const double delay = options_.retry_delay_seconds * (1u << std::min(t.attempts, 10u));
        ++t.attempts;
        ++retrying_;
        retries_.insert(
            std::upper_bound(retries_.begin(), retries_.end(), std::make_pair(Now() + delay, i)),
            std::make_pair(Now() + delay, i));
      } else {
        std::string why = o.message;
        if (o.kind == s3::Outcome::kRetry) why += " (" + std::to_string(t.attempts + 1) + " tries)";
        PartDone(t.op.tag, -static_cast<int64_t>(o.error),
                 targets_.paths[t.op.target] + ": " + std::move(why), out);
        free_.push_back(i);
      }
    }
    // Retries whose time has come.
    const double now = Now();
    while (!retries_.empty() && retries_.front().first <= now) {
      const uint32_t i = retries_.front().second;
      retries_.erase(retries_.begin());
      --retrying_;
      Start(i);
    }
    if (local_in_flight_ > 0) {
      const size_t before = out->size();
      DLFS_RETURN_IF_ERROR(local_->Poll(out));
      local_in_flight_ -= static_cast<uint32_t>(out->size() - before);
    }
    return Status::Ok();
  }

  bool RegisterBuffer(uint32_t, std::span<std::byte>) override { return false; }

  std::string Describe() const override {
    std::string s = "s3 (libcurl, up to " + std::to_string(capacity_) +
                    " ranged GETs in flight to " + config_.endpoint + ")";
    if (local_ != nullptr) s += "; local targets: " + local_->Describe();
    return s;
  }

 private:
  struct Transfer {
    std::unique_ptr<s3::Request> request;
    Op op{};
    uint32_t attempts = 0;
    bool added = false;
  };

  // What a read still waits for: its parts, and the first failure of one.
  struct Read {
    uint32_t parts_left = 0;
    int64_t bytes = 0;
    int64_t error = 0;  // -errno
    std::string detail;
  };

  // How a large read is split (Prepare).
  static constexpr uint32_t kParts = 8;
  static constexpr uint32_t kMinPart = 128u << 10;
  static constexpr uint32_t kMaxPart = 1u << 20;

  uint32_t in_flight() const { return running_ + retrying_ + local_in_flight_; }

  uint32_t NewTransfer() {
    if (free_.empty()) {
      free_.push_back(static_cast<uint32_t>(transfers_.size()));
      transfers_.emplace_back();
      transfers_.back().request = std::make_unique<s3::Request>();
    }
    const uint32_t i = free_.back();
    free_.pop_back();
    return i;
  }

  // A part of read `tag` ended with `result` (bytes or -errno); the read is
  // reported once all its parts have, failed if any part failed.
  void PartDone(uint64_t tag, int64_t result, std::string detail, std::vector<Completion>* out) {
    auto it = reads_.find(tag);
    Read& rd = it->second;
    if (result < 0 && rd.error == 0) {
      rd.error = result;
      rd.detail = std::move(detail);
    } else if (result > 0) {
      rd.bytes += result;
    }
    if (--rd.parts_left > 0) return;
    if (rd.error != 0) {
      out->push_back({tag, rd.error, std::move(rd.detail)});
    } else {
      out->push_back({tag, rd.bytes, {}});
    }
    reads_.erase(it);
  }

  // Sets transfer i's request up and hands it to the multi handle.
  void Start(uint32_t i) {
    Transfer& t = transfers_[i];
    const Op& op = t.op;
    t.request->Prepare(config_, options_, urls_[op.target], op.offset, op.length, op.buffer,
                       etags_[op.target]);
    index_of_[t.request.get()] = i;
    curl_multi_add_handle(multi_, t.request->easy());
    t.added = true;
    ++running_;
  }

  // Lets curl start what was added and handle what timed out: its timer,
  // when due (a handle just added asks for it at once).
  Status Drive() {
    if (timer_due_ < 0 || timer_due_ > Now()) return Status::Ok();
    timer_due_ = -1;
    int running = 0;
    const CURLMcode rc = curl_multi_socket_action(multi_, CURL_SOCKET_TIMEOUT, 0, &running);
    if (rc != CURLM_OK) {
      return Status::IOError(std::string("curl_multi_socket_action: ") + curl_multi_strerror(rc));
    }
    return Status::Ok();
  }

  // Waits up to wait_ms for the sockets curl watches (and the local pool's
  // eventfd), and hands each ready one to curl; then its timer if due.
  Status Wait(int wait_ms) {
    epoll_event events[64];
    const int n = ::epoll_wait(epoll_fd_, events, 64, wait_ms);
    if (n < 0 && errno != EINTR) return Status::FromErrno(errno, "epoll_wait");
    for (int i = 0; i < n; ++i) {
      const int fd = events[i].data.fd;
      if (fd == notify_fd_) {
        uint64_t v;
        (void)!::read(notify_fd_, &v, sizeof v);
        continue;
      }
      int flags = 0;
      if ((events[i].events & EPOLLIN) != 0) flags |= CURL_CSELECT_IN;
      if ((events[i].events & EPOLLOUT) != 0) flags |= CURL_CSELECT_OUT;
      if ((events[i].events & (EPOLLERR | EPOLLHUP)) != 0) flags |= CURL_CSELECT_ERR;
      int running = 0;
      const CURLMcode rc = curl_multi_socket_action(multi_, fd, flags, &running);
      if (rc != CURLM_OK) {
        return Status::IOError(std::string("curl_multi_socket_action: ") + curl_multi_strerror(rc));
      }
    }
    return Drive();
  }

  // curl says which sockets to watch for what.
  static int OnSocket(CURL*, curl_socket_t fd, int what, void* self, void*) {
    auto* b = static_cast<S3Backend*>(self);
    if (what == CURL_POLL_REMOVE) {
      ::epoll_ctl(b->epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
      b->watched_.erase(fd);
      return 0;
    }
    epoll_event ev{};
    ev.events = (what & CURL_POLL_IN ? EPOLLIN : 0u) | (what & CURL_POLL_OUT ? EPOLLOUT : 0u);
    ev.data.fd = fd;
    const bool known = !b->watched_.insert(fd).second;
    ::epoll_ctl(b->epoll_fd_, known ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, fd, &ev);
    return 0;
  }

  // curl's one timer: call it back (CURL_SOCKET_TIMEOUT) after timeout_ms;
  // -1 removes it.
  static int OnTimer(CURLM*, long timeout_ms, void* self) {
    auto* b = static_cast<S3Backend*>(self);
    b->timer_due_ = timeout_ms < 0 ? -1 : Now() + static_cast<double>(timeout_ms) / 1000;
    return 0;
  }

  const Targets& targets_;
  S3Options options_;
  s3::Config config_;
  uint32_t capacity_;
  std::vector<s3::Url> urls_;  // by target ("" bucket for a local one)
  std::vector<std::string> etags_;
  CURLM* multi_ = nullptr;
  int epoll_fd_ = -1;
  std::unordered_set<curl_socket_t> watched_;  // sockets in the epoll set
  double timer_due_ = -1;                      // when curl's timer fires (Now()); -1: none
  std::deque<Transfer> transfers_;             // a deque: references stay valid as it grows
  std::unordered_map<uint64_t, Read> reads_;   // by tag
  std::vector<uint32_t> free_;
  std::unordered_map<const s3::Request*, uint32_t> index_of_;
  std::deque<std::pair<double, uint32_t>> retries_;  // (due, transfer), earliest first
  uint32_t running_ = 0;                             // added to the multi handle
  uint32_t retrying_ = 0;                            // waiting for their retry
  std::unique_ptr<Backend> local_;
  int notify_fd_ = -1;
  uint32_t local_in_flight_ = 0;
  bool local_prepared_ = false;
};

}  // namespace

Result<std::unique_ptr<Backend>> CreateS3Backend(const Targets& targets,
                                                 const EngineOptions& options,
                                                 std::unique_ptr<Backend> local) {
  auto b = std::make_unique<S3Backend>(targets, options);
  DLFS_RETURN_IF_ERROR(b->Init(std::move(local)));
  return std::unique_ptr<Backend>(std::move(b));
}

}  // namespace dlfs::io_internal
