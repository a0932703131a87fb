// Read-only file mappings that survive the file shrinking under them.
//
// Touching a page of a file mapping past the file's end (the file was
// truncated after it was mapped) or whose read fails (a device error) raises
// SIGBUS, which would kill the process. For the mappings registered here a
// SIGBUS handler instead maps a page of zeros over the faulting page and
// records the fault, so the access goes on (reading zeros: checksums then
// fail) and the owner can tell, with Faulted(), that its bytes are no longer
// the file's. A SIGBUS at any other address goes to the handler installed
// before (or the default action: the process ends as it would have).
//
// The handler is installed on the first Register. A handler another
// component installs later (e.g. Python's faulthandler enabled after dlfs is
// loaded) runs first; if it does not chain, such a SIGBUS ends the process.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstddef>

namespace dlfs::map_guard {

// Registers [base, base + length) (page-aligned, as mmap returns it). At most
// 256 regions at once: false when the table is full (the region is then
// unprotected).
bool Register(const void* base, size_t length);
void Unregister(const void* base);

// Whether any registered region has faulted since the process started: one
// relaxed load, for hot paths to skip Faulted().
bool AnyFault();
// Whether the region registered at `base` has faulted.
bool Faulted(const void* base);

}  // namespace dlfs::map_guard
