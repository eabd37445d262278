// End-to-end self-test with real bytes: allocate host memory for every
// participant of both layouts, fill every source element with a pattern
// derived from its tensor and global element index, reshard, and check
// every target byte.

#ifndef RESHARD_SELFTEST_H_
#define RESHARD_SELFTEST_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

struct SelfTestOptions {
  std::string transport = "local";
  uint32_t threads = 1;
  // Called from the calling thread with the phase ("fill", "transfer",
  // "verify") and the fraction of its bytes done; may be empty.
  std::function<void(std::string_view phase, double fraction)> progress;
  // Measure the memcpy baseline (skipped when false).
  bool measure_memcpy = true;
};

struct SelfTestReport {
  bool verified = false;
  uint64_t bytes = 0;       // bytes written to targets
  uint64_t operations = 0;  // strided operations executed
  uint64_t segments = 0;    // rows under the row-by-row geometry
  double plan_seconds = 0;  // planning + binding
  double seconds = 0;       // the transfer itself
  // memcpy bandwidth of this machine measured in the same run, with as
  // many threads as the transfer (the baseline to compare against).
  double memcpy_gbps = 0;
  // Empty when verified; else names the first wrong tensor, fragment,
  // element and byte.
  std::string mismatch;
};

// The byte the pattern puts at byte `byte` of element `element` (global
// row-major index) of the tensor with index `tensor` in sorted tensor order.
uint8_t SelfTestPatternByte(uint64_t tensor, uint64_t element, uint64_t byte);

// Runs the self-test. A mismatch is reported in the report (verified =
// false), not as an error; errors are invalid inputs or plans.
Result<SelfTestReport> RunSelfTest(const WeightPlacementManifest& source,
                                   const WeightPlacementManifest& target,
                                   const SelfTestOptions& options = {});

}  // namespace reshard

#endif  // RESHARD_SELFTEST_H_
