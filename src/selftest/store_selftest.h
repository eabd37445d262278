// The self-test through the weight store: upload from the source layout,
// commit, load into the target layout, check every byte.

#ifndef RESHARD_SELFTEST_STORE_SELFTEST_H_
#define RESHARD_SELFTEST_STORE_SELFTEST_H_

#include "selftest/selftest.h"

namespace reshard::internal {

Result<SelfTestReport> RunStoreSelfTest(const WeightPlacementManifest& source,
                                        const WeightPlacementManifest& target,
                                        const SelfTestOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_SELFTEST_STORE_SELFTEST_H_
