#include "testing/status_testing.h"

#include <gmock/gmock.h>
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <string>

namespace reshard {
namespace {

using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;
using ::testing::Not;

Result<int> Seven() { return 7; }
Result<int> Missing() { return Status::NotFound("no such key: k"); }

TEST(StatusTestingTest, OkPassesForStatusAndResult) {
  ASSERT_OK(Status::OK());
  EXPECT_OK(Status::OK());
  ASSERT_OK(Seven());
  EXPECT_OK(Seven()) << "streamed context compiles";
}

TEST(StatusTestingTest, ExpectOkPrintsTheStatusMessage) {
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Status::InvalidArgument("bad dim 3")),
                          "InvalidArgument: bad dim 3");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Missing()), "NotFound: no such key: k");
  // The expression and the streamed context are printed too.
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Missing()) << "case 4",
                          "Missing() is not OK");
  EXPECT_NONFATAL_FAILURE(EXPECT_OK(Missing()) << "case 4", "case 4");
}

// Fatal failures need a function of their own: they return from it.
void AssertOkOn(const Status& st) { ASSERT_OK(st); }
void AssignMissing(int* out) {
  ASSERT_OK_AND_ASSIGN(*out, Missing());
  *out = -1;  // not reached
}

TEST(StatusTestingTest, AssertOkPrintsTheStatusMessageAndReturns) {
  EXPECT_FATAL_FAILURE(AssertOkOn(Status::DataLoss("checksum mismatch")),
                       "DataLoss: checksum mismatch");
  // A static: the statement of EXPECT_FATAL_FAILURE cannot name locals.
  static int value = 0;
  EXPECT_FATAL_FAILURE(AssignMissing(&value), "NotFound: no such key: k");
  EXPECT_FATAL_FAILURE(AssignMissing(&value), "Missing() is not OK");
  EXPECT_EQ(value, 0);
}

TEST(StatusTestingTest, AssertOkAndAssignDeclaresOrAssigns) {
  ASSERT_OK_AND_ASSIGN(const int declared, Seven());
  EXPECT_EQ(declared, 7);
  int assigned = 0;
  ASSERT_OK_AND_ASSIGN(assigned, Seven());
  EXPECT_EQ(assigned, 7);
  ASSERT_OK_AND_ASSIGN(auto moved, Result<std::string>(std::string("s")));
  EXPECT_EQ(moved, "s");
}

TEST(StatusTestingTest, StatusIsMatchesCodeAndMessage) {
  const Status st = Status::InvalidArgument("bad dim 3");
  EXPECT_THAT(st, StatusIs(StatusCode::kInvalidArgument, "bad dim 3"));
  EXPECT_THAT(st, StatusIs(StatusCode::kInvalidArgument, HasSubstr("dim")));
  EXPECT_THAT(st, StatusIs(StatusCode::kInvalidArgument));
  EXPECT_THAT(st, Not(StatusIs(StatusCode::kNotFound, "bad dim 3")));
  EXPECT_THAT(st, Not(StatusIs(StatusCode::kInvalidArgument, "bad dim")));
  EXPECT_THAT(Missing(), StatusIs(StatusCode::kNotFound, "no such key: k"));
  EXPECT_THAT(Seven(), StatusIs(StatusCode::kOk));
}

TEST(StatusTestingTest, StatusIsPrintsTheActualStatus) {
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(Missing(), StatusIs(StatusCode::kNotFound, "other")),
      "which is NotFound: no such key: k");
  EXPECT_NONFATAL_FAILURE(
      EXPECT_THAT(Status::OK(), StatusIs(StatusCode::kNotFound)),
      "has code NotFound");
}

}  // namespace
}  // namespace reshard
