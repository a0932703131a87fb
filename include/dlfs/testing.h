// Test hooks: faults injected below the I/O engines' completion loop.
//
// Not for production use. While a ScopedFaultInjection is alive, every
// IoEngine created in this process (directly, by a Loader, or by a
// ShardLoader) alters its completions as the FaultInjection says, so tests
// can drive short reads, EAGAIN storms, EIO and slow devices through the
// real code paths.
//
// Thread safety: create and destroy the scope while no engine is being
// created on another thread; engines copy the faults when created.
#pragma once

#include <cstdint>

namespace dlfs::testing {

// Counting is over the completions one engine sees, starting at 1.
struct FaultInjection {
  uint32_t eio_every = 0;     // every Nth completion fails with EIO
  uint32_t short_every = 0;   // every Nth completion transfers only half its bytes
  uint32_t eagain_every = 0;  // every Nth completion fails with EAGAIN (retried)
  uint32_t delay_us = 0;      // sleep before reaping each completion
  // A damaged range of a device: every read overlapping bytes
  // [eio_offset, eio_offset + eio_length) of target eio_target fails with
  // EIO, however often it is retried (eio_length 0: none).
  uint32_t eio_target = 0;
  uint64_t eio_offset = 0;
  uint64_t eio_length = 0;
};

// Installs `faults` for engines created during the scope's life; restores
// what was installed before on destruction (scopes nest).
class ScopedFaultInjection {
 public:
  explicit ScopedFaultInjection(const FaultInjection& faults);
  ~ScopedFaultInjection();
  ScopedFaultInjection(const ScopedFaultInjection&) = delete;
  ScopedFaultInjection& operator=(const ScopedFaultInjection&) = delete;

 private:
  FaultInjection faults_;
  const FaultInjection* previous_;
};

// The faults in force now, or nullptr (for engine factories).
const FaultInjection* ActiveFaultInjection();

}  // namespace dlfs::testing
