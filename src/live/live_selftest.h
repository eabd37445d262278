// The self-test over UCX: participants spread over processes, every target
// byte checked by the rank that holds it.

#ifndef RESHARD_LIVE_LIVE_SELFTEST_H_
#define RESHARD_LIVE_LIVE_SELFTEST_H_

#include "reshard/selftest.h"

namespace reshard::internal {

Result<SelfTestReport> RunUcxSelfTest(const WeightPlacementManifest& source,
                                      const WeightPlacementManifest& target,
                                      const SelfTestOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_LIVE_LIVE_SELFTEST_H_
