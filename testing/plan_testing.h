// ExpectSamePlan: one plan equal to another in every part a caller can
// read (ids, tensors, both fragment tables, regions in order, routes,
// participants and their bytes, traffic, the summary), each part its own
// expectation so that a failure names the part that differs.
//
//   ExpectSamePlan(*planned_on_two_threads, *planned_on_one);

#ifndef RESHARD_TESTING_PLAN_TESTING_H_
#define RESHARD_TESTING_PLAN_TESTING_H_

#include <gtest/gtest.h>

#include "reshard/plan.h"

namespace reshard::testing {

inline void ExpectSamePlan(const LogicalTransferPlan& actual,
                           const LogicalTransferPlan& expected) {
  EXPECT_EQ(actual.source_placement_id(), expected.source_placement_id());
  EXPECT_EQ(actual.target_placement_id(), expected.target_placement_id());
  EXPECT_EQ(actual.tensors(), expected.tensors());
  EXPECT_EQ(actual.source_fragments(), expected.source_fragments());
  EXPECT_EQ(actual.target_fragments(), expected.target_fragments());
  EXPECT_EQ(actual.regions(), expected.regions());
  EXPECT_EQ(actual.pipeline_routes(), expected.pipeline_routes());
  EXPECT_EQ(actual.source_participants(), expected.source_participants());
  EXPECT_EQ(actual.source_bytes(), expected.source_bytes());
  EXPECT_EQ(actual.target_participants(), expected.target_participants());
  EXPECT_EQ(actual.target_bytes(), expected.target_bytes());
  EXPECT_EQ(actual.traffic(), expected.traffic());
  EXPECT_EQ(PlanSummaryToJson(actual), PlanSummaryToJson(expected));
}

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_PLAN_TESTING_H_
