// The self-test over UCX: participants spread over processes, every target
// byte checked by the rank that holds it.

#ifndef RESHARD_SELFTEST_LIVE_SELFTEST_H_
#define RESHARD_SELFTEST_LIVE_SELFTEST_H_

#include "selftest/selftest.h"

namespace reshard::internal {

// The most processes a self-test runs (or joins with --rank): every rank
// initialises UCX and holds its own buffers, and more than this on one
// host measures nothing but contention. A self-test also refuses more
// processes than the placements have participants with fragments.
inline constexpr uint32_t kMaxSelfTestProcs = 64;

Result<SelfTestReport> RunUcxSelfTest(const WeightPlacementManifest& source,
                                      const WeightPlacementManifest& target,
                                      const SelfTestOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_SELFTEST_LIVE_SELFTEST_H_
