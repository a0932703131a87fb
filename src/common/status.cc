#include "dlfs/status.h"

#include <cerrno>
#include <cstring>

#include "dlfs/enum_names.h"

namespace dlfs {

namespace {
constexpr EnumName<StatusCode> kStatusCodeNames[] = {
    {StatusCode::kOk, "OK"},
    {StatusCode::kInvalidArgument, "InvalidArgument"},
    {StatusCode::kNotFound, "NotFound"},
    {StatusCode::kAlreadyExists, "AlreadyExists"},
    {StatusCode::kCorruption, "Corruption"},
    {StatusCode::kIOError, "IOError"},
    {StatusCode::kNotSupported, "NotSupported"},
    {StatusCode::kUnavailable, "Unavailable"},
    {StatusCode::kCancelled, "Cancelled"}};
}  // namespace

std::string_view StatusCodeName(StatusCode code) { return NameOf(kStatusCodeNames, code); }

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

std::string Reworded(std::string text, std::span<const Rewording> table) {
  for (const Rewording& r : table) {
    if (const size_t at = text.find(r.from); at != text.npos) text.replace(at, r.from.size(), r.to);
  }
  return text;
}

Status Status::Reworded(std::span<const Rewording> table) const {
  return Status(code_, dlfs::Reworded(message_, table), errno_);
}

}  // namespace dlfs
