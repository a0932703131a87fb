// S3 objects as targets. Read: the synchronous ranged GETs of
// s3/s3_client.h, at the version (ETag) pinned when the target was opened
// (dlfs/s3.h). Created: streamed to a multipart upload as the builder
// writes it, never whole on local disk nor in memory, and visible under
// its key only once published (CompleteMultipartUpload).
//
// The builder writes a target front to back, but for its first bytes (the
// superblock, rewritten last) and the tail it may rewind over (an aborted
// sample) or seal (the superblock's copy at the end). So the first kHead
// bytes stay in memory until Publish and go as part 1 (S3 assembles parts
// by number, whatever the order they came in), and of the rest only what
// lies more than kPart behind the furthest write is uploaded, kPart at a
// time: a write behind that is refused (it would be a bug of the builder).
#include <atomic>
#include <cstring>
#include <vector>

#include "io/target_kinds.h"
#include "s3/s3_client.h"

namespace dlfs::io_internal {

namespace {

class S3Target final : public Target {
 public:
  S3Target(s3::Url url, s3::ObjectInfo info)
      : Target(url.text), url_(std::move(url)), info_(std::move(info)), size_(info_.size) {}
  ~S3Target() override { s3::ReleasePin(url_); }

  TargetKind kind() const override { return TargetKind::kS3Object; }
  uint64_t size() const override { return size_; }

  Status Read(void* buf, size_t n, uint64_t offset, const std::string& what) const override {
    if (closed_.load()) return Status::IOError(what + ": target closed", EBADF);
    Status st = s3::Get(url_, offset, buf, n, info_.etag);
    // The URL is in the message already; add the caller's name if it differs.
    return st.ok() || what == url_.text ? st : st.WithContext(what);
  }

  void Close() override { closed_.store(true); }

  Status Write(const void*, size_t, uint64_t) override { return Unsupported(); }
  Status Resize(uint64_t, const std::string&) override { return Unsupported(); }
  Status Sync() override { return Unsupported(); }
  Status Publish() override { return Unsupported(); }
  Status SyncPublished() override { return Unsupported(); }
  void Withdraw(size_t) override {}

 private:
  Status Unsupported() const { return Status::NotSupported(name() + ": opened for reading"); }

  s3::Url url_;
  s3::ObjectInfo info_;
  uint64_t size_;
  std::atomic<bool> closed_{false};
};

// A new object, written through a multipart upload (see the top).
class S3NewObject final : public Target {
 public:
  S3NewObject(s3::Url url, bool overwrite)
      : Target(url.text), url_(std::move(url)), overwrite_(overwrite) {}

  TargetKind kind() const override { return TargetKind::kS3Object; }
  uint64_t size() const override { return end_; }

  // What was written and is still here (the head, the tail not uploaded).
  Status Read(void* buf, size_t n, uint64_t offset, const std::string& what) const override {
    auto* out = static_cast<std::byte*>(buf);
    if (offset + n <= head_.size()) {
      std::memcpy(out, head_.data() + offset, n);
      return Status::Ok();
    }
    if (offset >= uploaded_ && offset - uploaded_ + n <= pending_.size()) {
      std::memcpy(out, pending_.data() + (offset - uploaded_), n);
      return Status::Ok();
    }
    return Status::IOError(what + ": bytes " + std::to_string(offset) + ".." +
                               std::to_string(offset + n) + " are uploaded already",
                           EINVAL);
  }
  void Close() override {}

  Status Write(const void* buf, size_t n, uint64_t offset) override {
    const auto* in = static_cast<const std::byte*>(buf);
    if (offset < kHead) {  // the head, kept until Publish
      const size_t k = std::min<uint64_t>(n, kHead - offset);
      if (head_.size() < offset + k) head_.resize(offset + k);
      std::memcpy(head_.data() + offset, in, k);
      in += k;
      offset += k;
      n -= k;
      end_ = std::max(end_, offset);
      if (n == 0) return Status::Ok();
    }
    if (offset < uploaded_) {
      return Status::IOError(name() + ": a write at byte " + std::to_string(offset) +
                                 " goes back into what is uploaded already (up to byte " +
                                 std::to_string(uploaded_) + ")",
                             EINVAL);
    }
    if (head_.size() < kHead) head_.resize(kHead);  // a gap before: zeros
    const uint64_t at = offset - uploaded_;
    if (pending_.size() < at + n) pending_.resize(at + n);
    std::memcpy(pending_.data() + at, in, n);
    end_ = std::max(end_, offset + n);
    // Upload what lies a part or more behind the end.
    while (pending_.size() >= 2 * kPart) {
      DLFS_RETURN_IF_ERROR(UploadPart({pending_.data(), kPart}));
      pending_.erase(pending_.begin(), pending_.begin() + kPart);
      uploaded_ += kPart;
    }
    return Status::Ok();
  }

  Status Resize(uint64_t bytes, const std::string& needed_by) override {
    if (bytes < uploaded_ && next_part_ > 2) {
      return Status::InvalidArgument(name() + ": " + needed_by + " ends at byte " +
                                     std::to_string(bytes) + ", before what is uploaded already");
    }
    if (bytes <= kHead) {
      head_.resize(bytes);
      pending_.clear();
    } else {
      head_.resize(kHead);
      pending_.resize(bytes - uploaded_);
    }
    end_ = bytes;
    return Status::Ok();
  }

  // Nothing is durable before Publish: the object does not exist until then.
  Status Sync() override { return Status::Ok(); }

  Status Publish() override {
    if (!overwrite_) DLFS_RETURN_IF_ERROR(CheckNameFree(name(), false));
    if (!upload_) {  // small: one PUT
      std::vector<std::byte> whole = std::move(head_);
      whole.insert(whole.end(), pending_.begin(), pending_.end());
      DLFS_RETURN_IF_ERROR(s3::Put(url_, whole));
    } else {
      if (!pending_.empty()) DLFS_RETURN_IF_ERROR(UploadPart(pending_));
      DLFS_RETURN_IF_ERROR(upload_->Part(1, head_));
      DLFS_RETURN_IF_ERROR(upload_->Complete());
    }
    published_ = true;
    return Status::Ok();
  }
  Status SyncPublished() override { return Status::Ok(); }
  void Withdraw(size_t) override {
    if (published_) (void)s3::Delete(url_);
  }
  // An upload not completed is aborted by ~Upload.

 private:
  // Held in memory until Publish: part 1, at least S3's 5 MiB minimum.
  static constexpr uint64_t kHead = uint64_t{8} << 20;
  static constexpr size_t kPart = size_t{8} << 20;

  Status UploadPart(std::span<const std::byte> data) {
    if (!upload_) {
      DLFS_ASSIGN_OR_RETURN(upload_, s3::Upload::Start(url_));
    }
    return upload_->Part(next_part_++, data);
  }

  s3::Url url_;
  bool overwrite_;
  std::vector<std::byte> head_;     // bytes [0, kHead)
  std::vector<std::byte> pending_;  // bytes [uploaded_, end_) not uploaded yet
  uint64_t uploaded_ = kHead;       // parts 2.. hold [kHead, uploaded_)
  uint64_t end_ = 0;
  uint32_t next_part_ = 2;
  std::unique_ptr<s3::Upload> upload_;
  bool published_ = false;
};

}  // namespace

Result<std::unique_ptr<Target>> OpenS3Target(const std::string& url, TargetMode mode,
                                             const TargetOptions& options) {
  DLFS_ASSIGN_OR_RETURN(s3::Url u, s3::ParseUrl(url));
  if (mode == TargetMode::kCreate) {
    DLFS_ASSIGN_OR_RETURN(const s3::Config config, s3::LoadConfig());
    (void)config;  // a malformed setting is an error now, not after packing
    return std::unique_ptr<Target>(new S3NewObject(std::move(u), options.overwrite));
  }
  S3Options o;
  o.timeout_seconds = options.timeout_seconds;
  auto info = s3::Head(u, o);
  if (!info.ok()) {
    return options.what.empty() || options.what == url ? info.status()
                                                       : info.status().WithContext(options.what);
  }
  DLFS_RETURN_IF_ERROR(s3::AcquirePin(u, *info));
  return std::unique_ptr<Target>(new S3Target(std::move(u), std::move(info).value()));
}

}  // namespace dlfs::io_internal
