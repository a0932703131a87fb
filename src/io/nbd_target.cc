// NBD exports as targets: one synchronous libnbd connection (nbd::Connection)
// each. An export has no names: it is created and published in place
// (docs/format.md §6.1).
#include <algorithm>
#include <vector>

#include "io/target_kinds.h"
#include "nbd/nbd_client.h"

namespace dlfs::io_internal {

namespace {

class NbdTarget final : public Target {
 public:
  NbdTarget(const std::string& uri, std::unique_ptr<nbd::Connection> c)
      : Target(uri), c_(std::move(c)), size_(c_->size()) {}

  TargetKind kind() const override { return TargetKind::kNbdExport; }
  uint64_t size() const override { return size_; }

  Status Read(void* buf, size_t n, uint64_t offset, const std::string& what) const override {
    return c_->Read(buf, n, offset, what);
  }

  void FitTo(uint64_t bytes) override { size_ = std::min(size_, bytes); }
  // An NBD connection is closed once no read runs on it (each is bounded by
  // the read timeout); later reads fail.
  void Close() override { c_->Close(); }

  // An export cannot grow (docs/format.md §6.1): a write past its end is
  // the size check, made as soon as the data reaches it.
  Status Write(const void* buf, size_t n, uint64_t offset) override {
    if (offset > c_->size() || n > c_->size() - offset) {
      return Status::InvalidArgument(name() + ": export has " + std::to_string(c_->size()) +
                                     " bytes, fewer than the target written to it (which reaches "
                                     "byte " +
                                     std::to_string(offset + n) + " so far)");
    }
    return c_->Write(buf, n, offset, name());
  }

  Status Resize(uint64_t bytes, const std::string& needed_by) override {
    if (c_->size() < bytes) {
      return Status::InvalidArgument(name() + ": export has " + std::to_string(c_->size()) +
                                     " bytes, " + needed_by + " needs " + std::to_string(bytes));
    }
    return Status::Ok();
  }

  Status Sync() override { return c_->Flush(name()); }
  // Written in place: visible as soon as its superblock is.
  Status Publish() override { return Status::Ok(); }
  Status SyncPublished() override { return Status::Ok(); }

  void Withdraw(size_t header_bytes) override {
    const std::vector<std::byte> zeros(header_bytes);
    if (Write(zeros.data(), zeros.size(), 0).ok()) (void)Sync();
  }

 private:
  // Connection's synchronous methods lock, so it is used from many threads
  // through a const Target.
  std::unique_ptr<nbd::Connection> c_;
  uint64_t size_;
};

}  // namespace

Result<std::unique_ptr<Target>> OpenNbdTarget(const std::string& uri, TargetMode mode,
                                              const TargetOptions& options) {
  auto c = nbd::Connection::Open(uri, options.timeout_seconds, mode == TargetMode::kCreate);
  if (!c.ok()) {
    // The URI is in the message already; add the caller's name if it differs.
    return options.what.empty() || options.what == uri ? c.status()
                                                       : c.status().WithContext(options.what);
  }
  return std::unique_ptr<Target>(new NbdTarget(uri, std::move(c).value()));
}

}  // namespace dlfs::io_internal
