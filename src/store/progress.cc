#include "store/progress.h"

#include <algorithm>

namespace reshard::internal {

ProgressMeter::ProgressMeter(const ProgressCallback& callback, uint64_t total)
    : callback_(callback ? &callback : nullptr),
      total_(total),
      step_(std::max<uint64_t>(total / kMinStepFraction, 1)) {
  if (callback_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  CallLocked(std::chrono::steady_clock::now());
}

void ProgressMeter::Add(uint64_t n) {
  if (callback_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  done_ += n;
  if (done_ - reported_ >= step_) {
    CallLocked(std::chrono::steady_clock::now());
    return;
  }
  const auto now = std::chrono::steady_clock::now();
  if (done_ != reported_ && now - last_ >= kMinInterval) CallLocked(now);
}

void ProgressMeter::Finish() {
  if (callback_ == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (done_ != reported_) CallLocked(std::chrono::steady_clock::now());
}

uint64_t ProgressMeter::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return done_;
}

void ProgressMeter::CallLocked(std::chrono::steady_clock::time_point now) {
  reported_ = done_;
  last_ = now;
  (*callback_)(done_, total_);
}

}  // namespace reshard::internal
