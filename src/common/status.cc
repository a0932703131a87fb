#include "dlfs/status.h"

#include <cerrno>
#include <cstring>

namespace dlfs {

std::string_view StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "OK";
    case StatusCode::kInvalidArgument:
      return "InvalidArgument";
    case StatusCode::kNotFound:
      return "NotFound";
    case StatusCode::kAlreadyExists:
      return "AlreadyExists";
    case StatusCode::kCorruption:
      return "Corruption";
    case StatusCode::kIOError:
      return "IOError";
    case StatusCode::kNotSupported:
      return "NotSupported";
    case StatusCode::kUnavailable:
      return "Unavailable";
    case StatusCode::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

Status Status::FromErrno(int sys_errno, std::string_view context) {
  StatusCode code = StatusCode::kIOError;
  if (sys_errno == ENOENT || sys_errno == ENOTDIR) code = StatusCode::kNotFound;
  if (sys_errno == EEXIST) code = StatusCode::kAlreadyExists;
  std::string msg(context);
  msg += ": ";
  msg += std::strerror(sys_errno);
  return Status(code, std::move(msg), sys_errno);
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string s(StatusCodeName(code_));
  s += ": ";
  s += message_;
  return s;
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string msg(context);
  msg += ": ";
  msg += message_;
  return Status(code_, std::move(msg), errno_);
}

}  // namespace dlfs
