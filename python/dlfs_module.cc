// The `dlfs._dlfs` extension module: the bindings of each concept
// (bindings.h) registered in one module. The pure-Python package `dlfs`
// (python/dlfs/) re-exports it and adds dlfs.Writer and dlfs.torch.
#include <pybind11/pybind11.h>

#include "bindings.h"
#include "status_bridge.h"

PYBIND11_MODULE(_dlfs, m) {
  using namespace dlfs::python;
  m.doc() = "dlfs: packed sample volumes and a fast shuffled batch loader (C++ core).";

  RegisterStatusBridge(m);  // first: every binding below may raise through it
  // Batch before Volume, ImagePipeline before ImageLoader: a type is
  // registered before the signatures that name it (help() shows its Python name).
  RegisterLoader(m);
  RegisterVolume(m);
  RegisterSharedSlots(m);
  RegisterWriter(m);
  RegisterDecode(m);
  RegisterImageLoader(m);
  RegisterDistributed(m);
  RegisterTokens(m);
}
