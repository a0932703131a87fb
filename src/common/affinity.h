// The CPUs the calling thread may run on (its affinity, inherited from the
// process and set by launchers that bind ranks to cores), or 0 where the
// kernel does not say. Shared by the decisions that depend on spare cores:
// the loader's I/O thread count and the node cache's fill plan.
#pragma once

#include <sched.h>

namespace dlfs {

inline int AffinityCpus() {
  cpu_set_t mask;
  CPU_ZERO(&mask);
  return ::sched_getaffinity(0, sizeof mask, &mask) == 0 ? CPU_COUNT(&mask) : 0;
}

}  // namespace dlfs
