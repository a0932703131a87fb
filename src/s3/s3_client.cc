#include "s3/s3_client.h"

#include <curl/curl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

namespace dlfs {

bool IsS3Url(std::string_view path) { return path.starts_with("s3://"); }
bool S3Supported() { return true; }

namespace s3 {
namespace {

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? "" : v;
}

std::string Trim(std::string_view s) {
  const size_t b = s.find_first_not_of(" \t\r");
  if (b == std::string_view::npos) return "";
  const size_t e = s.find_last_not_of(" \t\r");
  return std::string(s.substr(b, e - b + 1));
}

// The AWS config and credentials files: "[section]" lines and "key = value"
// lines; what is not of that form (comments, nested settings) is skipped.
using Ini = std::map<std::string, std::map<std::string, std::string>>;
Ini ReadIni(const std::string& path) {
  Ini out;
  std::ifstream in(path);
  std::string line, section;
  while (std::getline(in, line)) {
    const std::string t = Trim(line);
    if (t.empty() || t[0] == '#' || t[0] == ';') continue;
    if (t.front() == '[' && t.back() == ']') {
      section = Trim(std::string_view(t).substr(1, t.size() - 2));
      continue;
    }
    if (line[0] == ' ' || line[0] == '\t') continue;  // a nested setting
    const size_t eq = t.find('=');
    if (eq == std::string::npos) continue;
    out[section][Trim(std::string_view(t).substr(0, eq))] =
        Trim(std::string_view(t).substr(eq + 1));
  }
  return out;
}

std::string HomeFile(const char* env, const char* name) {
  std::string p = Env(env);
  if (!p.empty()) return p;
  const std::string home = Env("HOME");
  return home.empty() ? "" : home + "/.aws/" + name;
}

Config ReadConfig() {
  Config c;
  const std::string profile = Env("AWS_PROFILE").empty() ? "default" : Env("AWS_PROFILE");
  const Ini config = ReadIni(HomeFile("AWS_CONFIG_FILE", "config"));
  const Ini credentials = ReadIni(HomeFile("AWS_SHARED_CREDENTIALS_FILE", "credentials"));
  const auto section = [&](const Ini& ini, const std::string& name) {
    auto it = ini.find(name);
    return it == ini.end() ? std::map<std::string, std::string>{} : it->second;
  };
  auto prof = section(config, profile == "default" ? "default" : "profile " + profile);
  const auto get = [](const std::map<std::string, std::string>& m, const char* k) {
    auto it = m.find(k);
    return it == m.end() ? std::string() : it->second;
  };
  c.region = Env("AWS_REGION");
  if (c.region.empty()) c.region = Env("AWS_DEFAULT_REGION");
  if (c.region.empty()) c.region = get(prof, "region");
  if (c.region.empty()) c.region = "us-east-1";
  c.endpoint = Env("AWS_ENDPOINT_URL_S3");
  if (c.endpoint.empty()) c.endpoint = Env("AWS_ENDPOINT_URL");
  if (c.endpoint.empty()) c.endpoint = get(prof, "endpoint_url");
  if (c.endpoint.empty()) c.endpoint = "https://s3." + c.region + ".amazonaws.com";
  while (!c.endpoint.empty() && c.endpoint.back() == '/') c.endpoint.pop_back();
  if (!Env("AWS_ACCESS_KEY_ID").empty()) {
    c.access_key = Env("AWS_ACCESS_KEY_ID");
    c.secret_key = Env("AWS_SECRET_ACCESS_KEY");
    c.session_token = Env("AWS_SESSION_TOKEN");
    c.credentials_from = "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY";
  } else {
    const auto creds = section(credentials, profile);
    c.access_key = get(creds, "aws_access_key_id");
    c.secret_key = get(creds, "aws_secret_access_key");
    c.session_token = get(creds, "aws_session_token");
    if (!c.access_key.empty())
      c.credentials_from = "profile '" + profile + "' of ~/.aws/credentials";
  }
  return c;
}

// The key as a URL path: every byte but the unreserved ones and '/'
// percent-encoded (what SigV4's canonical URI expects).
std::string EncodeKey(std::string_view key) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (unsigned char ch : key) {
    if (std::isalnum(ch) || ch == '-' || ch == '_' || ch == '.' || ch == '~' || ch == '/') {
      out += static_cast<char>(ch);
    } else {
      out += '%';
      out += kHex[ch >> 4];
      out += kHex[ch & 15];
    }
  }
  return out;
}

// <Tag>text</Tag> of an S3 error document, or "".
std::string XmlField(const std::string& body, const std::string& tag) {
  const size_t b = body.find("<" + tag + ">");
  if (b == std::string::npos) return "";
  const size_t s = b + tag.size() + 2;
  const size_t e = body.find("</" + tag + ">", s);
  return e == std::string::npos ? "" : body.substr(s, e - s);
}

bool StartsWithNoCase(std::string_view s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  }
  return true;
}

void GlobalInit() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

}  // namespace

Result<Url> ParseUrl(std::string_view text) {
  if (!IsS3Url(text)) return Status::InvalidArgument(std::string(text) + ": not an s3:// URL");
  const std::string_view rest = text.substr(5);
  const size_t slash = rest.find('/');
  if (slash == 0 || slash == std::string_view::npos || slash + 1 == rest.size()) {
    return Status::InvalidArgument(std::string(text) + ": an S3 target is s3://BUCKET/KEY");
  }
  return Url{std::string(rest.substr(0, slash)), std::string(rest.substr(slash + 1)),
             std::string(text)};
}

Result<Config> LoadConfig() {
  // Read again only when a variable that names where settings come from
  // changed (tests and programs may set them after the first use).
  static std::mutex mu;
  static std::string read_for;
  static Config cached;
  std::string key;
  for (const char* v :
       {"AWS_ENDPOINT_URL_S3", "AWS_ENDPOINT_URL", "AWS_REGION", "AWS_DEFAULT_REGION",
        "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE",
        "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE", "HOME"}) {
    key += Env(v) + '\n';
  }
  Config config;
  {
    std::lock_guard lock(mu);
    if (key != read_for) {
      cached = ReadConfig();
      read_for = key;
    }
    config = cached;
  }
  if (config.endpoint.find("://") == std::string::npos) {
    return Status::InvalidArgument("S3 endpoint '" + config.endpoint +
                                   "' (AWS_ENDPOINT_URL) is not a URL such as http://host:port");
  }
  if (!config.access_key.empty() && config.secret_key.empty()) {
    return Status::InvalidArgument("S3 credentials from " + config.credentials_from +
                                   " have an access key but no secret key");
  }
  return config;
}

S3Options WithEnvironment(S3Options options) {
  const std::string timeout = Env("DLFS_S3_TIMEOUT"), retries = Env("DLFS_S3_RETRIES");
  char* end = nullptr;
  if (!timeout.empty()) {
    const double t = std::strtod(timeout.c_str(), &end);
    if (end != timeout.c_str() && *end == '\0' && t > 0) options.timeout_seconds = t;
  }
  if (!retries.empty()) {
    const unsigned long r = std::strtoul(retries.c_str(), &end, 10);
    if (end != retries.c_str() && *end == '\0' && r <= 100)
      options.retries = static_cast<uint32_t>(r);
  }
  return options;
}

Status Outcome::ToStatus(const std::string& where) const {
  if (error == ENOENT) return Status::NotFound(where + ": " + message);
  return Status::IOError(where + ": " + message, error);
}

Request::Request() {
  GlobalInit();
  easy_ = curl_easy_init();
}

Request::~Request() {
  if (headers_ != nullptr) curl_slist_free_all(headers_);
  if (easy_ != nullptr) curl_easy_cleanup(easy_);
}

void Request::Reset(const Config& config, const S3Options& options, const Url& url,
                    const std::string& query) {
  curl_easy_reset(easy_);  // keeps the handle's connections
  if (headers_ != nullptr) curl_slist_free_all(headers_);
  headers_ = nullptr;
  buffer_ = nullptr;
  length_ = 0;
  got_ = 0;
  overflow_ = false;
  call_ = false;
  upload_ = {};
  upload_pos_ = 0;
  error_body_.clear();
  etag_.clear();
  content_length_ = 0;
  curl_error_[0] = '\0';
  credentials_from_ = config.credentials_from;
  std::string http = config.endpoint + "/" + url.bucket + "/" + EncodeKey(url.key);
  if (!query.empty()) http += "?" + query;
  curl_easy_setopt(easy_, CURLOPT_URL, http.c_str());
  curl_easy_setopt(easy_, CURLOPT_NOSIGNAL, 1L);
  if (std::getenv("DLFS_S3_VERBOSE")) curl_easy_setopt(easy_, CURLOPT_VERBOSE, 1L);
  curl_easy_setopt(easy_, CURLOPT_TIMEOUT_MS, static_cast<long>(options.timeout_seconds * 1000));
  curl_easy_setopt(easy_, CURLOPT_CONNECTTIMEOUT_MS,
                   static_cast<long>(std::min(options.timeout_seconds, 10.0) * 1000));
  curl_easy_setopt(easy_, CURLOPT_ERRORBUFFER, curl_error_);
  curl_easy_setopt(easy_, CURLOPT_WRITEFUNCTION, &Request::OnBody);
  curl_easy_setopt(easy_, CURLOPT_WRITEDATA, this);
  curl_easy_setopt(easy_, CURLOPT_HEADERFUNCTION, &Request::OnHeader);
  curl_easy_setopt(easy_, CURLOPT_HEADERDATA, this);
  curl_easy_setopt(easy_, CURLOPT_PRIVATE, this);
  // Fewer, larger receives: a 100 KB sample in one callback, not seven.
  curl_easy_setopt(easy_, CURLOPT_BUFFERSIZE, 128L * 1024);
  if (!config.access_key.empty()) {
    curl_easy_setopt(easy_, CURLOPT_AWS_SIGV4, ("aws:amz:" + config.region + ":s3").c_str());
    curl_easy_setopt(easy_, CURLOPT_USERNAME, config.access_key.c_str());
    curl_easy_setopt(easy_, CURLOPT_PASSWORD, config.secret_key.c_str());
    // RADOS Gateway refuses SigV4 without it (curl signs what is given).
    headers_ = curl_slist_append(headers_, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
    if (!config.session_token.empty()) {
      headers_ =
          curl_slist_append(headers_, ("x-amz-security-token: " + config.session_token).c_str());
    }
  }
}

void Request::Prepare(const Config& config, const S3Options& options, const Url& url,
                      uint64_t offset, size_t length, std::byte* buffer, const std::string& etag) {
  Reset(config, options, url, "");
  buffer_ = buffer;
  length_ = length;
  // A HEAD has no error body to name the missing bucket or key by: a GET of
  // one byte answers as much (Content-Range holds the size) and says why.
  const uint64_t last = offset + std::max<size_t>(length, 1) - 1;
  headers_ = curl_slist_append(
      headers_, ("Range: bytes=" + std::to_string(offset) + "-" + std::to_string(last)).c_str());
  if (!etag.empty()) headers_ = curl_slist_append(headers_, ("If-Match: " + etag).c_str());
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_);
}

void Request::PrepareCall(const Config& config, const S3Options& options, const Url& url,
                          const std::string& method, const std::string& query,
                          std::span<const std::byte> body) {
  Reset(config, options, url, query);
  call_ = true;
  if (method == "PUT") {
    upload_ = body;
    curl_easy_setopt(easy_, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(easy_, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(body.size()));
    curl_easy_setopt(easy_, CURLOPT_READFUNCTION, &Request::OnUpload);
    curl_easy_setopt(easy_, CURLOPT_READDATA, this);
  } else if (method == "POST") {
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDS, reinterpret_cast<const char*>(body.data()));
    curl_easy_setopt(easy_, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  } else if (method == "HEAD") {
    curl_easy_setopt(easy_, CURLOPT_NOBODY, 1L);
  } else {
    curl_easy_setopt(easy_, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  // Named, not left out: curl's SigV4 signs the type it would send
  // otherwise. (An empty "Expect:" to skip 100-continue breaks the
  // signature the same way: the round trip stays.)
  headers_ = curl_slist_append(headers_, "Content-Type: application/octet-stream");
  curl_easy_setopt(easy_, CURLOPT_HTTPHEADER, headers_);
}

size_t Request::OnUpload(char* data, size_t size, size_t n, void* self) {
  auto* r = static_cast<Request*>(self);
  const size_t k = std::min(size * n, r->upload_.size() - r->upload_pos_);
  std::memcpy(data, r->upload_.data() + r->upload_pos_, k);
  r->upload_pos_ += k;
  return k;
}

size_t Request::OnHeader(char* data, size_t size, size_t n, void* self) {
  auto* r = static_cast<Request*>(self);
  const std::string_view line(data, size * n);
  if (line.starts_with("HTTP/")) {  // a new response (after a 100 Continue)
    r->etag_.clear();
    r->content_length_ = 0;
  } else if (StartsWithNoCase(line, "etag:")) {
    r->etag_ = Trim(line.substr(5));
    if (!r->etag_.empty() && r->etag_.back() == '\n') r->etag_.pop_back();
    r->etag_ = Trim(r->etag_);
  } else if (StartsWithNoCase(line, "content-range:")) {
    // "bytes 0-0/12345": the object's size after the '/'.
    const size_t slash = line.rfind('/');
    if (slash != std::string_view::npos) {
      r->content_length_ = std::strtoull(std::string(line.substr(slash + 1)).c_str(), nullptr, 10);
    }
  }
  return size * n;
}

size_t Request::OnBody(char* data, size_t size, size_t n, void* self) {
  auto* r = static_cast<Request*>(self);
  const size_t bytes = size * n;
  long status = 0;
  curl_easy_getinfo(r->easy_, CURLINFO_RESPONSE_CODE, &status);
  if (r->call_ || (status != 206 && status != 200)) {
    if (r->error_body_.size() < (1u << 20)) r->error_body_.append(data, bytes);
    return bytes;
  }
  if (r->length_ == 0) return bytes;  // the info request's one byte
  // 200 is the whole object: the server did not take the range.
  if (status == 200 || r->got_ + bytes > r->length_) {
    r->overflow_ = true;
    return 0;  // stops the transfer
  }
  std::memcpy(r->buffer_ + r->got_, data, bytes);
  r->got_ += bytes;
  return bytes;
}

Outcome Request::Finish(int code) {
  const auto failed = [](int e, std::string m) {
    return Outcome{Outcome::kFailed, e, std::move(m)};
  };
  const auto retry = [](int e, std::string m) { return Outcome{Outcome::kRetry, e, std::move(m)}; };
  if (overflow_) {
    return failed(EIO, "the server sent more than the " + std::to_string(length_) +
                           " bytes asked for (it did not honour the Range header)");
  }
  const std::string detail =
      curl_error_[0] != '\0' ? curl_error_ : curl_easy_strerror(CURLcode(code));
  switch (code) {
    case CURLE_OK:
      break;
    case CURLE_OPERATION_TIMEDOUT:
      return retry(ETIMEDOUT, "no answer in time (" + detail + ")");
    case CURLE_COULDNT_CONNECT:
      return retry(ECONNREFUSED, "cannot connect to the S3 endpoint (" + detail + ")");
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
      return retry(EIO, "the connection failed (" + detail + ")");
    default:
      return failed(EIO, "request failed (" + detail + ")");
  }
  long status = 0;
  curl_easy_getinfo(easy_, CURLINFO_RESPONSE_CODE, &status);
  const std::string s3code = XmlField(error_body_, "Code");
  std::string http = "HTTP " + std::to_string(status);
  if (!s3code.empty()) http += " " + s3code;
  const std::string text = XmlField(error_body_, "Message");
  if (!text.empty()) http += ": " + text;
  // CompleteMultipartUpload may fail after its 200 has been sent: the
  // body then is an <Error>.
  if (call_ && status >= 200 && status < 300 && error_body_.find("<Error>") == std::string::npos) {
    return Outcome{};
  }
  if (call_ && status >= 200 && status < 300) return retry(EIO, http + " (in a 200 response)");
  if (!call_ && (status == 206 || status == 200)) {
    if (length_ > 0 && got_ != length_) {
      return failed(EIO, "the object ends before byte " + std::to_string(length_) +
                             " of the range asked for (got " + std::to_string(got_) +
                             "): it is shorter than the volume says (truncated?)");
    }
    return Outcome{};
  }
  if (status == 412 || status == 304) {
    return failed(ESTALE, "the object was replaced since this process opened it (" + http +
                              "); open the volume again");
  }
  if (status == 404) {
    return failed(ENOENT, s3code == "NoSuchBucket" ? "no such bucket (" + http + ")"
                                                   : "no such key (" + http + ")");
  }
  if (status == 403) {
    return failed(EACCES,
                  "access denied (" + http + "); the credentials came from " +
                      (credentials_from_.empty() ? "nowhere (none set)" : credentials_from_));
  }
  if (status == 416) {
    return failed(EIO, "the object is shorter than the range asked for (" + http + ")");
  }
  if (status == 301 || status == 307 ||
      (status == 400 && s3code == "AuthorizationHeaderMalformed")) {
    return failed(EIO, http + " (is AWS_REGION the bucket's region?)");
  }
  if (status == 429 || status >= 500) return retry(EIO, http);
  return failed(EIO, http);
}

ObjectInfo Request::info() const { return ObjectInfo{content_length_, etag_}; }

namespace {

// Requests kept for the synchronous calls, so that their connections are
// reused (Volume::Open reads the superblock, the table and the directory
// one after another).
// A child of fork() (a DataLoader worker) must not use them: their
// connections' sockets are shared with the parent, and two processes
// reading one socket would each get parts of the other's responses. The
// child drops them unused (not cleaned up, which could write to those
// sockets) and opens its own.
std::mutex g_pool_mu;
std::vector<std::unique_ptr<Request>> g_pool;
pid_t g_pool_pid = 0;

// A pooled request of this process, or a new one.
std::unique_ptr<Request> TakeRequest() {
  std::lock_guard lock(g_pool_mu);
  if (g_pool_pid != ::getpid()) {
    for (auto& r : g_pool) (void)r.release();
    g_pool.clear();
    g_pool_pid = ::getpid();
  }
  if (g_pool.empty()) return std::make_unique<Request>();
  std::unique_ptr<Request> r = std::move(g_pool.back());
  g_pool.pop_back();
  return r;
}

void ReturnRequest(std::unique_ptr<Request> r) {
  std::lock_guard lock(g_pool_mu);
  if (g_pool_pid == ::getpid() && g_pool.size() < 16) g_pool.push_back(std::move(r));
}

std::mutex g_pins_mu;
struct Pin {
  std::string etag;
  uint32_t holders = 0;
};
std::map<std::string, Pin> g_pins;

// Runs one request to its end on a pooled handle: `prepare` sets it up
// (again for each retry), `done` reads what it returned. Failures worth
// another try are retried as `options` allows; errors name the URL.
template <typename Prepare, typename Done>
Status Run(const Url& url, const S3Options& given, Prepare prepare, Done done) {
  DLFS_ASSIGN_OR_RETURN(const Config config, LoadConfig());
  const S3Options options = WithEnvironment(given);
  std::unique_ptr<Request> r = TakeRequest();
  Status st;
  for (uint32_t attempt = 0;; ++attempt) {
    prepare(*r, config, options);
    const Outcome o = r->Finish(curl_easy_perform(r->easy()));
    if (o.kind == Outcome::kDone) {
      st = done(*r);
      break;
    }
    if (o.kind == Outcome::kFailed) {
      st = o.ToStatus(url.text);
      break;
    }
    if (attempt >= options.retries) {
      st = Outcome{o.kind, o.error, o.message + " (" + std::to_string(attempt + 1) + " tries)"}
               .ToStatus(url.text);
      break;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(options.retry_delay_seconds *
                                                              (1u << std::min(attempt, 10u))));
  }
  ReturnRequest(std::move(r));
  return st;
}

// A query parameter's value, percent-encoded.
std::string QueryValue(std::string_view v) {
  std::string out = EncodeKey(v);
  std::string slashless;
  for (char c : out) slashless += c == '/' ? std::string("%2F") : std::string(1, c);
  return slashless;
}

}  // namespace

Result<ObjectInfo> Head(const Url& url, const S3Options& options) {
  ObjectInfo info;
  DLFS_RETURN_IF_ERROR(Run(
      url, options,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.Prepare(c, o, url, 0, 0, nullptr, "");
      },
      [&](Request& r) {
        info = r.info();
        return Status::Ok();
      }));
  return info;
}

Status Get(const Url& url, uint64_t offset, void* buffer, size_t length, const std::string& etag,
           const S3Options& options) {
  if (length == 0) return Status::Ok();
  return Run(
      url, options,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.Prepare(c, o, url, offset, length, static_cast<std::byte*>(buffer), etag);
      },
      [](Request&) { return Status::Ok(); });
}

Status Put(const Url& url, std::span<const std::byte> data, const S3Options& options) {
  return Run(
      url, options,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.PrepareCall(c, o, url, "PUT", "", data);
      },
      [](Request&) { return Status::Ok(); });
}

Status Delete(const Url& url, const S3Options& options) {
  return Run(
      url, options,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.PrepareCall(c, o, url, "DELETE", "", {});
      },
      [](Request&) { return Status::Ok(); });
}

Result<std::unique_ptr<Upload>> Upload::Start(const Url& url, const S3Options& options) {
  std::string id;
  DLFS_RETURN_IF_ERROR(Run(
      url, options,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.PrepareCall(c, o, url, "POST", "uploads=", {});
      },
      [&](Request& r) {
        id = XmlField(r.body(), "UploadId");
        return id.empty() ? Status::IOError(url.text +
                                            ": the server started a multipart upload "
                                            "but sent no UploadId")
                          : Status::Ok();
      }));
  return std::unique_ptr<Upload>(new Upload(url, options, std::move(id)));
}

Upload::~Upload() {
  if (done_) return;
  // Abort, best effort: the parts uploaded are dropped, no object appears.
  (void)Run(
      url_, options_,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.PrepareCall(c, o, url_, "DELETE", "uploadId=" + QueryValue(id_), {});
      },
      [](Request&) { return Status::Ok(); });
}

Status Upload::Part(uint32_t number, std::span<const std::byte> data) {
  const std::string query = "partNumber=" + std::to_string(number) + "&uploadId=" + QueryValue(id_);
  return Run(
      url_, options_,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.PrepareCall(c, o, url_, "PUT", query, data);
      },
      [&](Request& r) {
        if (r.etag().empty()) {
          return Status::IOError(url_.text + ": part " + std::to_string(number) +
                                 " uploaded but the server sent no ETag");
        }
        etags_[number] = r.etag();
        return Status::Ok();
      });
}

Status Upload::Complete() {
  std::string xml = "<CompleteMultipartUpload>";
  for (const auto& [number, etag] : etags_) {
    xml += "<Part><PartNumber>" + std::to_string(number) + "</PartNumber><ETag>" + etag +
           "</ETag></Part>";
  }
  xml += "</CompleteMultipartUpload>";
  const std::span<const std::byte> body(reinterpret_cast<const std::byte*>(xml.data()), xml.size());
  DLFS_RETURN_IF_ERROR(Run(
      url_, options_,
      [&](Request& r, const Config& c, const S3Options& o) {
        r.PrepareCall(c, o, url_, "POST", "uploadId=" + QueryValue(id_), body);
      },
      [](Request&) { return Status::Ok(); }));
  done_ = true;
  return Status::Ok();
}

Status AcquirePin(const Url& url, const ObjectInfo& info) {
  std::lock_guard lock(g_pins_mu);
  Pin& p = g_pins[url.text];
  if (p.holders > 0 && p.etag != info.etag) {
    return Status::IOError(url.text + ": the object was replaced (ETag " + p.etag + ", now " +
                               info.etag +
                               ") while this process still has a volume of it open; close that "
                               "volume first",
                           ESTALE);
  }
  p.etag = info.etag;
  ++p.holders;
  return Status::Ok();
}

void ReleasePin(const Url& url) {
  std::lock_guard lock(g_pins_mu);
  auto it = g_pins.find(url.text);
  if (it != g_pins.end() && it->second.holders > 0 && --it->second.holders == 0) g_pins.erase(it);
}

std::string Pinned(const std::string& url_text) {
  std::lock_guard lock(g_pins_mu);
  auto it = g_pins.find(url_text);
  return it == g_pins.end() ? "" : it->second.etag;
}

}  // namespace s3
}  // namespace dlfs
