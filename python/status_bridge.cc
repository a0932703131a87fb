// The Status -> Python exception translator (see status_bridge.h).
#include "status_bridge.h"

#include <cerrno>
#include <exception>
#include <string>

namespace py = pybind11;

namespace dlfs::python {
namespace {

PyObject* g_corrupt_error = nullptr;  // dlfs.CorruptVolumeError, alive with the module

// The library names options by their C++ fields; most keywords are spelled
// the same, these are said differently from Python.
constexpr Rewording kKeywordSpellings[] = {{"(the fields option)", "(fields=[NAME, ...])"},
                                           {"(the fields option, one name)", "(field=NAME)"},
                                           {"set cycle to", "pass cycle=True to"}};

void TranslateStatus(const Status& st) {
  const std::string msg = Reworded(st.message(), kKeywordSpellings);
  switch (st.code()) {
    case StatusCode::kCorruption:
      PyErr_SetString(g_corrupt_error, msg.c_str());
      return;
    case StatusCode::kInvalidArgument:
      PyErr_SetString(PyExc_ValueError, msg.c_str());
      return;
    case StatusCode::kNotFound:
      if (st.sys_errno() == 0) {  // a path inside a volume: a missing key
        PyErr_SetString(PyExc_KeyError, msg.c_str());
        return;
      }
      break;
    case StatusCode::kNotSupported:
      PyErr_SetString(PyExc_NotImplementedError, msg.c_str());
      return;
    case StatusCode::kCancelled:
      PyErr_SetString(PyExc_KeyboardInterrupt, msg.c_str());
      return;
    case StatusCode::kUnavailable:
      if (st.sys_errno() == 0) {
        PyErr_SetString(PyExc_RuntimeError, msg.c_str());
        return;
      }
      break;
    default:
      break;
  }
  // OS errors: OSError(errno, message) picks the right subclass
  // (FileNotFoundError, PermissionError, ...).
  const int err = st.sys_errno() != 0                       ? st.sys_errno()
                  : st.code() == StatusCode::kAlreadyExists ? EEXIST
                                                            : EIO;
  py::object e = py::reinterpret_borrow<py::object>(PyExc_OSError)(err, msg);
  PyErr_SetObject(reinterpret_cast<PyObject*>(Py_TYPE(e.ptr())), e.ptr());
}

}  // namespace

void RegisterStatusBridge(py::module_& m) {
  static py::exception<StatusError> corrupt(m, "CorruptVolumeError", PyExc_Exception);
  g_corrupt_error = corrupt.ptr();
  corrupt.doc() =
      "A volume failed an integrity check: bad magic, checksum mismatch, truncation, or a "
      "damaged sample. The message names the file and the problem.";
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      TranslateStatus(e.status);
    }
  });
}

}  // namespace dlfs::python
