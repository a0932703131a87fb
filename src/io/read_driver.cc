#include "io/read_driver.h"

#include <algorithm>

#include "common/clock.h"

namespace dlfs::io_internal {

namespace {

// A request's tag: its job's id in the high half, its index within the
// job's current round in the low half.
constexpr uint64_t kRequestBits = 32;
constexpr uint64_t kRequestMask = (uint64_t{1} << kRequestBits) - 1;

}  // namespace

bool RequestList::NextRound(std::vector<ReadRequest>* out) {
  if (issued_) return false;
  issued_ = true;
  *out = requests;
  results.assign(requests.size(), Status::Ok());
  return true;
}

void RequestList::Complete(size_t r, const Status& status) {
  if (r < results.size()) results[r] = status;
}

ReadDriver::ReadDriver(IoEngine& engine) : engine_(engine) {}

ReadDriver::~ReadDriver() { (void)Drain(); }

ReadDriverStats ReadDriver::stats() const {
  ReadDriverStats s;
  s.jobs = jobs_done_.load(std::memory_order_relaxed);
  s.requests = requests_.load(std::memory_order_relaxed);
  s.bytes = bytes_.load(std::memory_order_relaxed);
  s.wait_seconds = static_cast<double>(wait_ns_.load(std::memory_order_relaxed)) / 1e9;
  return s;
}

bool ReadDriver::Advance(uint64_t id, Active& a) {
  while (!a.cancelled && a.job->NextRound(&round_)) {
    if (round_.empty()) continue;  // a round of nothing is complete at once
    uint64_t bytes = 0;
    for (size_t r = 0; r < round_.size(); ++r) {
      engine_.Enqueue(round_[r], (id << kRequestBits) | r);
      bytes += round_[r].length;
    }
    a.outstanding = round_.size();
    a.job->bytes_read_ += bytes;
    requests_.fetch_add(round_.size(), std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
    return false;
  }
  return true;
}

void ReadDriver::Finish(uint64_t id, Active& a) {
  a.job->seconds_ = Now() - a.started;
  jobs_done_.fetch_add(1, std::memory_order_relaxed);
  finished_.push_back(id);
}

uint64_t ReadDriver::Start(ReadJob* job) {
  // Ids wrap at 2^32 (they share a tag with the request's index): a job
  // started 2^32 jobs ago is long finished.
  const uint64_t id = next_id_++ & kRequestMask;
  job->bytes_read_ = 0;
  job->seconds_ = 0;
  Active& a = jobs_.emplace(id, Active{job, Now()}).first->second;
  if (Advance(id, a)) {
    Finish(id, a);
    jobs_.erase(id);
  } else {
    // Submit errors surface in the next Reap, which fails every pending
    // request with them.
    (void)engine_.Submit();
  }
  return id;
}

Status ReadDriver::ReapInto(size_t min_complete) {
  done_.clear();
  const double t0 = min_complete > 0 ? Now() : 0;
  Status st = engine_.Reap(&done_, min_complete);
  if (min_complete > 0) {
    wait_ns_.fetch_add(static_cast<uint64_t>((Now() - t0) * 1e9), std::memory_order_relaxed);
  }
  bool more = false;  // a job queued a further round
  // A job's completions mostly come together: look each job up once.
  auto it = jobs_.end();
  for (const ReadCompletion& c : done_) {
    const uint64_t id = c.tag >> kRequestBits;
    if (it == jobs_.end() || it->first != id) it = jobs_.find(id);
    if (it == jobs_.end()) continue;
    Active& a = it->second;
    a.job->Complete(c.tag & kRequestMask, c.status);
    if (a.outstanding > 0) --a.outstanding;
    if (a.outstanding > 0) continue;
    if (st.ok() && !Advance(id, a)) {
      more = true;
      continue;
    }
    Finish(id, a);
    jobs_.erase(it);
    it = jobs_.end();
  }
  if (!st.ok()) {
    // Every pending request completed with the error (handled above), or
    // the engine is broken and reads may still land: forget the jobs.
    jobs_.clear();
    return st;
  }
  if (more) (void)engine_.Submit();
  return Status::Ok();
}

Status ReadDriver::Poll(bool wait, std::vector<uint64_t>* finished) {
  Status st;
  // One wait at most: a completion that finished no job still returns, so
  // that a streaming reader can start more work (the Loader's next batch)
  // before it waits again.
  if (!jobs_.empty()) st = ReapInto(wait && finished_.empty() ? 1 : 0);
  finished->insert(finished->end(), finished_.begin(), finished_.end());
  finished_.clear();
  return st;
}

void ReadDriver::Cancel(const std::function<bool(uint64_t id)>& which) {
  bool any = false;
  for (auto& [id, a] : jobs_) {
    if (!a.cancelled && which(id)) a.cancelled = any = true;
  }
  if (any) {
    engine_.Cancel([&](uint64_t tag) {
      auto it = jobs_.find(tag >> kRequestBits);
      return it != jobs_.end() && it->second.cancelled;
    });
  }
}

Status ReadDriver::Drain() {
  Cancel([](uint64_t) { return true; });
  Status st;
  while (st.ok() && !jobs_.empty() && engine_.pending() > 0) st = ReapInto(engine_.pending());
  jobs_.clear();
  finished_.clear();
  return st;
}

Status ReadDriver::Run(ReadJob& job) {
  const uint64_t id = Start(&job);
  std::vector<uint64_t> finished;
  while (std::find(finished.begin(), finished.end(), id) == finished.end()) {
    DLFS_RETURN_IF_ERROR(Poll(true, &finished));
  }
  return Status::Ok();
}

Status ReadDriver::Read(std::vector<ReadRequest> requests, std::vector<Status>* results) {
  RequestList list(std::move(requests));
  DLFS_RETURN_IF_ERROR(Run(list));
  *results = std::move(list.results);
  return Status::Ok();
}

}  // namespace dlfs::io_internal
