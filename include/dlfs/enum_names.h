// Names of enum values: one table per enum drives printing, parsing, the
// list of accepted values in error messages, and the CLI's choices, so a
// name is written exactly once.
//
//   inline constexpr EnumName<EngineKind> kEngineKindNames[] = {
//       {EngineKind::kAuto, "auto"}, {EngineKind::kUring, "uring"}, ...};
//   NameOf(kEngineKindNames, EngineKind::kUring)        -> "uring"
//   ParseEnum(kEngineKindNames, "pread", "engine")      -> EngineKind::kPread
//   ParseEnum(kEngineKindNames, "x", "engine")          -> InvalidArgument
//       "unknown engine 'x' (expected auto, uring or pread)"
//
// Thread safety: the functions are pure.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "dlfs/status.h"

namespace dlfs {

template <typename E>
struct EnumName {
  E value;
  std::string_view name;
};

// The name of `value`, or "?" when the table lacks it.
template <typename E, size_t N>
constexpr std::string_view NameOf(const EnumName<E> (&table)[N], E value) {
  for (const EnumName<E>& e : table) {
    if (e.value == value) return e.name;
  }
  return "?";
}

// "a, b or c": every name of the table, for messages and help texts.
template <typename E, size_t N>
std::string JoinNames(const EnumName<E> (&table)[N]) {
  std::string out;
  for (size_t i = 0; i < N; ++i) {
    if (i > 0) out += i + 1 == N ? " or " : ", ";
    out += table[i].name;
  }
  return out;
}

// Every name of the table, in table order (e.g. for CLI11's IsMember).
template <typename E, size_t N>
std::vector<std::string> NamesOf(const EnumName<E> (&table)[N]) {
  std::vector<std::string> out;
  out.reserve(N);
  for (const EnumName<E>& e : table) out.emplace_back(e.name);
  return out;
}

// The value named `name`; InvalidArgument naming `what` and every accepted
// name otherwise.
template <typename E, size_t N>
Result<E> ParseEnum(const EnumName<E> (&table)[N], std::string_view name, std::string_view what) {
  for (const EnumName<E>& e : table) {
    if (e.name == name) return e.value;
  }
  return Status::InvalidArgument("unknown " + std::string(what) + " '" + std::string(name) +
                                 "' (expected " + JoinNames(table) + ")");
}

}  // namespace dlfs
