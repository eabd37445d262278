// ReshardRowsAndCheck: a local reshard between two placements of small
// uint8 tensors four columns wide, every source byte derived from its
// element's global position and every target byte checked after it.
//
//   ReshardRowsAndCheck(tp8, tp2, /*bytes=*/36 + 2 * 32, "v");

#ifndef RESHARD_TESTING_RESHARD_TESTING_H_
#define RESHARD_TESTING_RESHARD_TESTING_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/api.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "testing/status_testing.h"

namespace reshard::testing {

// Fills every source fragment with its elements' global values (row * 4 +
// column, plus 100 for tensor `marked`), reshards into buffers poisoned
// with 0xEE, and checks every target byte; the plan and the reshard must
// move `bytes`.
inline void ReshardRowsAndCheck(const WeightPlacementManifest& source,
                                const WeightPlacementManifest& target,
                                uint64_t bytes, std::string_view marked) {
  std::map<std::string, std::vector<uint8_t>> memory[2];
  auto value = [marked](const PlacementFragment& f, size_t i) {
    const int64_t row = f.global_offset()[0] + static_cast<int64_t>(i) / 4;
    return static_cast<uint8_t>((f.tensor_id() == marked ? 100 : 0) + row * 4 +
                                static_cast<int64_t>(i) % 4);
  };
  for (int side = 0; side < 2; ++side) {
    for (const PlacementFragment* f :
         (side == 0 ? source : target).fragments()) {
      auto& v = memory[side][f->placement_fragment_id()];
      v.assign(f->nbytes(), 0xEE);
      if (side == 1) continue;
      for (size_t i = 0; i < v.size(); ++i) v[i] = value(*f, i);
    }
  }
  auto lookup = [&](int side) {
    return [&, side](std::string_view id) -> void* {
      return memory[side].at(std::string(id)).data();
    };
  };
  BufferBindingOptions so, to;
  so.instance_id = "source";
  to.instance_id = "target";
  ASSERT_OK_AND_ASSIGN(auto sb, BindAllBuffers(source, lookup(0), so));
  ASSERT_OK_AND_ASSIGN(auto tb, BindAllBuffers(target, lookup(1), to));
  ASSERT_OK_AND_ASSIGN(auto plan, LogicalTransferPlan::Make(source, target));
  EXPECT_EQ(plan.summary().bytes, bytes);
  ASSERT_OK_AND_ASSIGN(auto report, Reshard(source, sb, target, tb));
  EXPECT_EQ(report.bytes, bytes);
  for (const PlacementFragment* f : target.fragments()) {
    const auto& v = memory[1][f->placement_fragment_id()];
    for (size_t i = 0; i < v.size(); ++i) {
      ASSERT_EQ(v[i], value(*f, i)) << f->tensor_id() << " byte " << i;
    }
  }
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_RESHARD_TESTING_H_
