// Calls an operation's ProgressCallback (weight_store.h) at a bounded
// rate: loads, uploads, imports, exports and checkpoint writes count their
// bytes through one ProgressMeter.

#ifndef RESHARD_STORE_PROGRESS_H_
#define RESHARD_STORE_PROGRESS_H_

#include <chrono>
#include <cstdint>
#include <mutex>

#include "reshard/weight_store.h"

namespace reshard::internal {

class ProgressMeter {
 public:
  // At most one call per kMinStepFraction of `total` bytes or per
  // kMinInterval, whichever comes first, plus the first and the last.
  static constexpr uint64_t kMinStepFraction = 256;
  static constexpr std::chrono::milliseconds kMinInterval{100};

  // Calls callback(0, total) at once unless `callback` is empty (then the
  // meter does nothing). `callback` must outlive the meter.
  ProgressMeter(const ProgressCallback& callback, uint64_t total);

  // Counts `n` more bytes done; may call the callback (on this thread,
  // never two calls at once). Safe from several threads.
  void Add(uint64_t n);

  // Calls callback(done, total) unless the last call said exactly that.
  void Finish();

  // The bytes counted so far (0 when the callback is empty).
  uint64_t done() const;

 private:
  void CallLocked(std::chrono::steady_clock::time_point now);

  const ProgressCallback* callback_;
  const uint64_t total_;
  const uint64_t step_;
  mutable std::mutex mu_;
  uint64_t done_ = 0;
  uint64_t reported_ = 0;
  std::chrono::steady_clock::time_point last_;
};

}  // namespace reshard::internal

#endif  // RESHARD_STORE_PROGRESS_H_
