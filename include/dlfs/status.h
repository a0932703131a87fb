// Status and Result<T>: how every dlfs module reports failure.
//
// The core library throws no exceptions. Functions that can fail return a
// `Status` (no value) or a `Result<T>` (a value or a Status). Both are
// [[nodiscard]]: ignoring an error is a compile-time warning.
//
// A Status carries a canonical code, a human-readable message that names the
// file and the problem (e.g. "fmnist.dlfs: directory checksum mismatch"), and
// the errno that caused it when it came from the OS (0 otherwise).
//
// Thread safety: Status and Result are values; distinct objects may be used
// from distinct threads freely.
#pragma once

#include <cassert>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace dlfs {

// Canonical error codes. The numbers are stable (they reach Python and exit
// codes); never renumber or reuse one.
enum class StatusCode : int {
  kOk = 0,
  kInvalidArgument = 1,  // the caller passed something unusable
  kNotFound = 2,         // a path, sample or file does not exist
  kAlreadyExists = 3,    // refusing to overwrite something the user has
  kCorruption = 4,       // stored bytes fail a checksum or a structural check
  kIOError = 5,          // the OS reported an error (see errno())
  kNotSupported = 6,     // valid but unsupported (newer format, feature off)
  kUnavailable = 7,      // a kernel or hardware feature is missing here
  kCancelled = 8,        // the operation was interrupted on request
};

// Returns "InvalidArgument", "Corruption", ... for messages and bindings.
std::string_view StatusCodeName(StatusCode code);

// A library message names the option that would change its outcome by the
// option's field ("set overwrite to replace it"); a front end says which of
// its flags or keywords sets it instead through a table of these.
struct Rewording {
  std::string_view from;  // as the library's message has it
  std::string_view to;    // what the front end says instead
};
// `text` with the first occurrence of each entry's `from` replaced.
std::string Reworded(std::string text, std::span<const Rewording> table);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message, int sys_errno = 0)
      : code_(code), errno_(sys_errno), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string msg) {
    return Status(StatusCode::kInvalidArgument, std::move(msg));
  }
  static Status NotFound(std::string msg) { return Status(StatusCode::kNotFound, std::move(msg)); }
  static Status AlreadyExists(std::string msg) {
    return Status(StatusCode::kAlreadyExists, std::move(msg));
  }
  static Status Corruption(std::string msg) {
    return Status(StatusCode::kCorruption, std::move(msg));
  }
  static Status NotSupported(std::string msg) {
    return Status(StatusCode::kNotSupported, std::move(msg));
  }
  static Status Unavailable(std::string msg) {
    return Status(StatusCode::kUnavailable, std::move(msg));
  }
  static Status IOError(std::string msg, int sys_errno = 0) {
    return Status(StatusCode::kIOError, std::move(msg), sys_errno);
  }
  static Status Cancelled(std::string msg) {
    return Status(StatusCode::kCancelled, std::move(msg));
  }
  // An OS error: the message gets ": " + strerror(sys_errno) appended, and
  // ENOENT maps to kNotFound, EEXIST to kAlreadyExists, others to kIOError.
  static Status FromErrno(int sys_errno, std::string_view context);

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  int sys_errno() const { return errno_; }
  const std::string& message() const { return message_; }

  // "Corruption: fmnist.dlfs: directory checksum mismatch"; "OK" when ok().
  std::string ToString() const;

  // Returns a copy whose message is prefixed with `context` + ": ".
  Status WithContext(std::string_view context) const;

  // A copy whose message is reworded by `table` (see Rewording).
  Status Reworded(std::span<const Rewording> table) const;

 private:
  StatusCode code_ = StatusCode::kOk;
  int errno_ = 0;
  std::string message_;
};

// A value of type T, or the Status explaining why there is none. Shaped like
// C++23 std::expected<T, Status> so a later switch is mechanical.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT: implicit by design
    assert(!std::get<Status>(v_).ok() && "Result constructed from an OK status");
  }

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  // REQUIRES: ok().
  T& value() & { return std::get<0>(v_); }
  const T& value() const& { return std::get<0>(v_); }
  T&& value() && { return std::get<0>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

  // The error; an OK status when ok().
  Status status() const { return ok() ? Status() : std::get<1>(v_); }

 private:
  std::variant<T, Status> v_;
};

}  // namespace dlfs

// Propagates a non-OK Status from the enclosing function.
#define DLFS_RETURN_IF_ERROR(expr)               \
  do {                                           \
    ::dlfs::Status dlfs_status_ = (expr);        \
    if (!dlfs_status_.ok()) return dlfs_status_; \
  } while (0)

#define DLFS_CONCAT_INNER_(a, b) a##b
#define DLFS_CONCAT_(a, b) DLFS_CONCAT_INNER_(a, b)

// `DLFS_ASSIGN_OR_RETURN(auto x, MakeX());` declares x from a Result's value,
// or returns the Result's Status from the enclosing function.
#define DLFS_ASSIGN_OR_RETURN(lhs, expr) \
  DLFS_ASSIGN_OR_RETURN_IMPL_(DLFS_CONCAT_(dlfs_result_, __LINE__), lhs, expr)
#define DLFS_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(tmp).value()
