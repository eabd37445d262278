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

// How long the launcher waits for its ranks before ending those still
// running: 3 x timeout for the session, and as much again for each
// update of a standing session (each update may wait on its peers up to
// the timeout at every stage). Saturates instead of overflowing.
std::chrono::milliseconds LaunchDeadline(const SelfTestOptions& options);

Result<SelfTestReport> RunLiveSelfTest(const WeightPlacementManifest& source,
                                       const WeightPlacementManifest& target,
                                       const SelfTestOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_SELFTEST_LIVE_SELFTEST_H_
