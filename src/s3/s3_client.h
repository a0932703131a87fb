// Internal: requests to an S3 server with libcurl — where the server is and
// who asks (Config, from the environment and ~/.aws, dlfs/s3.h), one
// request's set-up (Request: the URL, SigV4 signing, the headers, the
// response into a caller's buffer), what a response means (Classify: done,
// worth another try, or an error naming the URL), and the synchronous
// calls the simple paths use (Head, Get). The I/O engine's S3 backend
// (src/io/s3_backend.cc) drives many Requests at once with curl's multi
// interface.
//
// Thread safety: Config is read once per process and then constant;
// a Request is for one thread at a time; Head and Get may be called from
// any number of threads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "dlfs/s3.h"
#include "dlfs/status.h"

typedef void CURL;
struct curl_slist;

namespace dlfs::s3 {

// s3://BUCKET/KEY.
struct Url {
  std::string bucket;
  std::string key;
  std::string text;  // as given: how messages name it
};
// InvalidArgument naming `text` when it is not s3://BUCKET/KEY.
Result<Url> ParseUrl(std::string_view text);

// Where the server is and who asks (dlfs/s3.h says from where).
struct Config {
  std::string endpoint;  // "http://127.0.0.1:7480", no trailing '/'
  std::string region;
  std::string access_key;
  std::string secret_key;
  std::string session_token;
  std::string credentials_from;  // "AWS_ACCESS_KEY_ID", "~/.aws/credentials [p]", "" (none)
};
// The process's configuration, read at the first call; InvalidArgument for
// an unreadable or malformed setting (naming it).
Result<Config> LoadConfig();

// `options` with DLFS_S3_TIMEOUT and DLFS_S3_RETRIES applied where set
// (dlfs/s3.h); a value that is not a number is ignored.
S3Options WithEnvironment(S3Options options);

// An object's size and version (ETag, quotes included, as servers send it).
struct ObjectInfo {
  uint64_t size = 0;
  std::string etag;
};

// What a finished request means.
struct Outcome {
  enum Kind { kDone, kRetry, kFailed } kind = kDone;
  int error = 0;        // errno for kFailed/kRetry: EIO, ENOENT, EACCES, ESTALE, ETIMEDOUT, ...
  std::string message;  // "HTTP 403 SignatureDoesNotMatch: ..." (no URL)
  // The status of kFailed: the message after `where`, the errno's code.
  Status ToStatus(const std::string& where) const;
};

// One request, reused for many: set up, run (by curl_easy_perform or a
// multi handle), then Finish says what it meant.
class Request {
 public:
  Request();
  ~Request();
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;

  CURL* easy() const { return easy_; }

  // A GET of [offset, offset + length) of `url` into `buffer` (which must
  // hold `length` bytes), only of version `etag` when not empty. length 0:
  // a HEAD.
  void Prepare(const Config& config, const S3Options& options, const Url& url, uint64_t offset,
               size_t length, std::byte* buffer, const std::string& etag);
  // Any other request: `method` ("PUT", "POST", "DELETE", "HEAD") of
  // `url` with `query` (its parameters sorted, values encoded: SigV4
  // signs it as given) and `body` (held by the caller until Finish). The
  // response's body is kept (body()).
  void PrepareCall(const Config& config, const S3Options& options, const Url& url,
                   const std::string& method, const std::string& query,
                   std::span<const std::byte> body);
  // After curl is done with it (`code`: its CURLcode): done (bytes() holds
  // the bytes received), or why not. A short body is kFailed (the object
  // ends sooner: truncated).
  Outcome Finish(int code);
  size_t bytes() const { return got_; }
  // A HEAD's result (after Finish said done).
  ObjectInfo info() const;
  // A call's response body, and its ETag header.
  const std::string& body() const { return error_body_; }
  const std::string& etag() const { return etag_; }

 private:
  static size_t OnBody(char* data, size_t size, size_t n, void* self);
  static size_t OnHeader(char* data, size_t size, size_t n, void* self);
  static size_t OnUpload(char* data, size_t size, size_t n, void* self);
  // What Prepare and PrepareCall share.
  void Reset(const Config& config, const S3Options& options, const Url& url,
             const std::string& query);

  CURL* easy_ = nullptr;
  curl_slist* headers_ = nullptr;
  std::byte* buffer_ = nullptr;
  size_t length_ = 0;
  size_t got_ = 0;
  bool overflow_ = false;
  bool call_ = false;                  // PrepareCall's: success is any 2xx
  std::span<const std::byte> upload_;  // a PUT's body, and how much curl took
  size_t upload_pos_ = 0;
  std::string error_body_;  // a non-2xx response's body (its start), or a call's
  std::string etag_;        // the response's ETag header
  uint64_t content_length_ = 0;
  std::string credentials_from_;  // for the message of a 403
  char curl_error_[256] = {};
};

// Synchronous requests with the retries S3Options allows; errors name the
// URL: NotFound (no such bucket or key), IOError EACCES (credentials
// refused), ESTALE (the object is no longer version `etag`), ETIMEDOUT or
// EIO (the server did not answer well within the retries).
Result<ObjectInfo> Head(const Url& url, const S3Options& options = {});
Status Get(const Url& url, uint64_t offset, void* buffer, size_t length, const std::string& etag,
           const S3Options& options = {});

// A new object, written whole (Put) or in parts (Upload: S3's multipart
// upload, for objects larger than one request should carry). The object
// appears under its key only when complete (Put returned, Complete
// returned); an Upload destroyed before Complete is aborted, leaving
// nothing. Errors name the URL.
Status Put(const Url& url, std::span<const std::byte> data, const S3Options& options = {});
Status Delete(const Url& url, const S3Options& options = {});
class Upload {
 public:
  static Result<std::unique_ptr<Upload>> Start(const Url& url, const S3Options& options = {});
  ~Upload();
  // Uploads part `number` (1..10000). Every part but the last must hold at
  // least 5 MiB (S3's rule).
  Status Part(uint32_t number, std::span<const std::byte> data);
  // Makes the object of the parts uploaded, in number order.
  Status Complete();

 private:
  Upload(Url url, S3Options options, std::string id)
      : url_(std::move(url)), options_(options), id_(std::move(id)) {}
  Url url_;
  S3Options options_;
  std::string id_;
  std::map<uint32_t, std::string> etags_;  // by part number
  bool done_ = false;
};

// The ETag a process reads each object at (dlfs/s3.h). Acquire pins
// `info.etag` for `url` while any holder lives: FailedPrecondition-like
// IOError ESTALE naming the URL when another holder in this process pinned
// a different version (the object was replaced while a volume of it is
// open). Release drops one hold. Pinned returns the pinned ETag, or "".
Status AcquirePin(const Url& url, const ObjectInfo& info);
void ReleasePin(const Url& url);
std::string Pinned(const std::string& url_text);

}  // namespace dlfs::s3
