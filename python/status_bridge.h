// The one bridge from dlfs's Status to Python exceptions, for every binding
// file of the `dlfs._dlfs` extension.
//
// Binding code reports an error Status by throwing StatusError (Check and
// Unwrap do); the translator RegisterStatusBridge installs turns it into:
//   kCorruption                 -> dlfs.CorruptVolumeError
//   kInvalidArgument            -> ValueError
//   kNotFound without an errno  -> KeyError (a path inside a volume)
//   kNotSupported               -> NotImplementedError
//   kCancelled                  -> KeyboardInterrupt
//   kUnavailable without errno  -> RuntimeError
//   anything else               -> OSError(errno, message), whose errno picks
//                                  the subclass (FileNotFoundError, ...); EEXIST
//                                  for kAlreadyExists, EIO when there is none
// The message is the Status's, with the few option names Python spells
// otherwise reworded as keywords (status_bridge.cc).
#pragma once

#include <pybind11/pybind11.h>

#include <utility>

#include "dlfs/status.h"

namespace dlfs::python {

// Carries a Status from binding code to the translator.
struct StatusError {
  Status status;
};

// Throws StatusError unless `st` is OK.
inline void Check(const Status& st) {
  if (!st.ok()) throw StatusError{st};
}

// The value of `r`; throws StatusError for an error.
template <typename T>
T Unwrap(Result<T> r) {
  if (!r.ok()) throw StatusError{r.status()};
  return std::move(r).value();
}

// Defines dlfs.CorruptVolumeError in `m` and registers the translator. Call
// once, before anything that may throw StatusError is bound.
void RegisterStatusBridge(pybind11::module_& m);

}  // namespace dlfs::python
