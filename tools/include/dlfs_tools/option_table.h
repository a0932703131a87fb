// One declaration per option: the descriptor the option tables are made
// of (dlfs_tools/loader_option_table.h: the loader's; dlfs_tools/pack_option_table.h:
// the packer's; dlfs_tools/decode_option_table.h: the decode pipeline's;
// dlfs_tools/lmdb_option_table.h: `dlfs lmdb read`'s). An option names its
// Python keyword and/or its `dlfs` flag, where its value lives in the
// table's Config struct (whose default member initializers are the defaults
// everywhere), its --help text and how its text is read. The front ends
// derive their parts from a table and never list the options again: the
// CLI11 flags (apps/dlfs/cli.h, AddOptions), the pybind11 keywords, their
// conversions and the signature in the docstrings
// (python/option_keywords.h). Adding an option is adding its entry to a
// table (and the library code that uses the field).
//
// A table is a std::tuple of Option<Config, T> (one T per option), so the
// Python bindings expand it at compile time: pybind11 sees one typed
// parameter per keyword, as a hand-written signature would give it.
//
// Thread safety: the tables are constants.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "dlfs/enum_names.h"
#include "dlfs/status.h"

namespace dlfs::options {

// The member at a path of member pointers from a Config:
// &At<&LoaderConfig::loader, &LoaderOptions::sampler, &SamplerOptions::seed>
// is a function LoaderConfig& -> uint64_t& (an Option's `field`).
template <auto First, auto... Rest, typename Config>
constexpr auto& At(Config& c) {
  return ((c.*First).*....*Rest);
}

// A `dlfs` flag taking no value that sets the option to `value` (--no-verify
// sets verify_checksums to false). Bool options only.
struct FlagSetting {
  std::string_view flag;  // "": none
  bool value = true;
  std::string_view help;
};

template <typename Config, typename T>
struct Option {
  using ConfigType = Config;
  using Value = T;

  // The Python keyword; "": a flag of `dlfs` only.
  std::string_view keyword;
  // Where the value lives; nullptr: a keyword with no field here, whose
  // Python object the bindings convert themselves (e.g. comm=).
  T& (*field)(Config&) = nullptr;
  // A `dlfs` flag taking a value ("-b,--batch" as CLI11 names it); "": none.
  std::string_view flag = {};
  std::string_view help = {};  // the flag's --help
  // Flags taking no value (bool options): each sets the option.
  std::array<FlagSetting, 2> settings = {};
  // Enums: the names the flag and the keyword take (dlfs/enum_names.h).
  std::span<const EnumName<T>> names = {};
  // Reads the flag's text where CLI11 cannot (sizes like "2G"); nullptr:
  // CLI11 converts it.
  Result<T> (*parse)(std::string_view) = nullptr;
  // --help's "[default]": the value's, `default_text` where given, none
  // when !show_default (options whose default is "not given").
  std::string_view default_text = {};
  bool show_default = true;
  // CLI11's Range check of a number flag, where max > 0.
  uint64_t min = 0, max = 0;
  // Python: a keyword without a default (given by position); a keyword the
  // bindings take as any object and convert themselves (None: the default).
  bool required = false;
  bool python_object = false;
  // Python: the keyword takes None too (its default), which leaves the
  // field as it is; e.g. fields=None.
  bool none_keeps_default = false;
  // Python: an enum keyword given as "" leaves the field as it is (the
  // default), as directory="" always has.
  bool empty_keeps_default = false;
};

// The name of `value` in `names` ("?" when it has none), and the value
// named `text` (InvalidArgument naming `what` and the names otherwise), as
// NameOf and ParseEnum (dlfs/enum_names.h) for a table's span.
template <typename E>
constexpr std::string_view NameIn(std::span<const EnumName<E>> names, E value) {
  for (const EnumName<E>& e : names) {
    if (e.value == value) return e.name;
  }
  return "?";
}
template <typename E>
Result<E> ParseName(std::span<const EnumName<E>> names, std::string_view text,
                    std::string_view what) {
  std::string expected;
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i].name == text) return names[i].value;
    if (i > 0) expected += i + 1 == names.size() ? " or " : ", ";
    expected += names[i].name;
  }
  return Status::InvalidArgument("unknown " + std::string(what) + " '" + std::string(text) +
                                 "' (expected " + expected + ")");
}

}  // namespace dlfs::options
