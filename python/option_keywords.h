// The pybind11 side of an option table (dlfs_tools/option_table.h): each option
// with a Python keyword becomes one typed parameter of a constructor or
// function, with its default from the table's Config, in table order, so
// pybind11's signature (which dlfs/_keywords.py reads to name misspelt
// keywords and values of the wrong type) is what a hand-written one would
// be. Conversions: an enum takes its name; a none_keeps_default option
// takes None for "as it is"; a python_object one arrives as the object,
// for the bindings to convert (KeywordObjects).
#pragma once

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstddef>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "dlfs_tools/option_table.h"
#include "status_bridge.h"

namespace dlfs::python {

// The python_object keywords' values by keyword (None where not given).
class KeywordObjects {
 public:
  const pybind11::object& operator[](std::string_view keyword) const {
    static const pybind11::object none = pybind11::none();
    auto it = objects_.find(keyword);
    return it == objects_.end() ? none : it->second;
  }
  void set(std::string_view keyword, pybind11::object value) {
    objects_[keyword] = std::move(value);
  }

 private:
  std::map<std::string_view, pybind11::object> objects_;
};

template <const auto& Table, size_t I>
struct KeywordOption {
  static constexpr const auto& option = std::get<I>(Table);
  using Option = std::decay_t<decltype(option)>;
  using Config = typename Option::ConfigType;
  using T = typename Option::Value;
  // The C++ type of its pybind11 parameter.
  using Param = std::conditional_t<
      option.python_object, pybind11::object,
      std::conditional_t<std::is_enum_v<T>, std::string,
                         std::conditional_t<option.none_keeps_default, std::optional<T>, T>>>;

  // Its pybind11 argument, with the default from Config's.
  static pybind11::arg Arg() { return pybind11::arg(option.keyword.data()); }
  static pybind11::arg_v ArgWithDefault() {
    if constexpr (std::is_same_v<Param, pybind11::object> || option.none_keeps_default) {
      return Arg() = pybind11::none();
    } else {
      static const Config defaults;
      const T& d = option.field(const_cast<Config&>(defaults));
      if constexpr (std::is_enum_v<T>) {
        return Arg() = std::string(options::NameIn(option.names, d));
      } else {
        return Arg() = d;
      }
    }
  }

  // ValueError unless `value` is in the option's range (min..max, as the
  // flag's CLI11 Range check), where it has one.
  static void CheckRange(const T& value) {
    if constexpr (std::is_arithmetic_v<T> && option.max > 0) {
      if (value < option.min || value > option.max) {
        throw pybind11::value_error(std::string(option.keyword) + " is " +
                                    std::to_string(option.min) + ".." + std::to_string(option.max) +
                                    (option.none_keeps_default ? " (or None)" : "") + ", not " +
                                    std::to_string(value));
      }
    }
  }

  // Sets the option in `config` (or keeps the object in `objects`).
  // ValueError for a value out of its range or an unknown enum name.
  static void Apply(Param value, Config& config, KeywordObjects& objects) {
    if constexpr (std::is_same_v<Param, pybind11::object>) {
      objects.set(option.keyword, std::move(value));
    } else if constexpr (std::is_enum_v<T>) {
      if (value.empty() && option.empty_keeps_default) return;
      option.field(config) = Unwrap(options::ParseName(option.names, value, option.keyword));
    } else if constexpr (option.none_keeps_default) {
      if (!value) return;
      CheckRange(*value);
      option.field(config) = std::move(*value);
    } else {
      CheckRange(value);
      option.field(config) = std::move(value);
    }
  }

  // `keyword=default` as the docstrings' signature lines show it.
  static std::string Shown() {
    std::string out(option.keyword);
    if (option.required) return out;
    auto arg = ArgWithDefault();
    pybind11::object value =
        arg.value ? pybind11::reinterpret_borrow<pybind11::object>(arg.value) : pybind11::none();
    std::string repr = pybind11::repr(value).cast<std::string>();
    if (pybind11::isinstance<pybind11::str>(value)) {
      repr = "\"" + value.cast<std::string>() + "\"";
    }
    return out + "=" + repr;
  }
};

// The pybind11 argument of the option at `I`: with its default unless
// it is required.
template <const auto& Table, size_t I>
auto ArgOf() {
  if constexpr (std::get<I>(Table).required) {
    return KeywordOption<Table, I>::Arg();
  } else {
    return KeywordOption<Table, I>::ArgWithDefault();
  }
}

// "Name(lead, keyword=default, ...)" wrapped at `width` columns, the
// continuation lines under the first argument: a docstring's signature
// line, from the table.
template <const auto& Table>
std::string SignatureLine(const std::string& name, const std::string& lead, size_t width = 78) {
  std::vector<std::string> parts = {lead};
  [&]<size_t... I>(std::index_sequence<I...>) {
    (parts.push_back(KeywordOption<Table, I>::Shown()), ...);
  }
  (std::make_index_sequence<std::tuple_size_v<std::decay_t<decltype(Table)>>>{});
  const std::string indent(name.size() + 1, ' ');
  std::string out = name + "(";
  size_t line = 0;  // where the current line starts in `out`
  for (size_t i = 0; i < parts.size(); ++i) {
    const std::string part = parts[i] + (i + 1 == parts.size() ? ")" : ",");
    if (i > 0 && out.size() - line + part.size() + 1 > width) {
      out += "\n" + indent;
      line = out.size() - indent.size();
    } else if (i > 0) {
      out += " ";
    }
    out += part;
  }
  return out + "\n";
}

}  // namespace dlfs::python
