// The self-test through the weight store: upload from the source layout,
// commit, load into the target layout, check every byte.

#ifndef RESHARD_STORE_STORE_SELFTEST_H_
#define RESHARD_STORE_STORE_SELFTEST_H_

#include "reshard/selftest.h"

namespace reshard::internal {

Result<SelfTestReport> RunStoreSelfTest(const WeightPlacementManifest& source,
                                        const WeightPlacementManifest& target,
                                        const SelfTestOptions& options);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_STORE_SELFTEST_H_
