// The launcher's sum of the ranks' report records: per-update counts
// summed, opens and rejoins the most any rank saw, each failed update's
// failure as the lowest rank reported it, and a restarted rank's report
// after the one of the process it replaced.

#include "selftest/live_reports.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "reshard/live.h"
#include "testing/must.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

// A target rank's report of updates at `regions` regions each (0 for a
// failed one) and `seconds` verifying.
SelfTestReport RankReport(std::vector<uint64_t> regions, uint64_t opens) {
  SelfTestReport r;
  r.verified = true;
  r.ranks_ready = 1;
  r.bytes = 512;
  r.operations = 512;
  r.opens = opens;
  for (uint64_t n : regions) {
    r.verified_regions.push_back(n);
    r.verify_seconds.push_back(n == 0 ? 0 : 0.25);
    r.update_seconds.push_back(n == 0 ? 0 : 0.5);
    r.wire_bytes.push_back(n);
  }
  return r;
}

TEST(LiveReportsTest, FailuresAreTheLowestRanksAndCountsAreSummed) {
  testing::TempDir dir("reshard-live-reports");
  auto store = Must(OpenRendezvous(dir.path()));
  SelfTestReport zero = RankReport({0, 0, 0}, 1);
  zero.failed_updates = {2};
  zero.failures = {"update 2: Aborted: decided by rank 1"};
  SelfTestReport one = RankReport({512, 0, 512}, 1);
  one.failed_updates = {2};
  one.failures = {"update 2: DataLoss: region 8 differs"};
  SelfTestReport two = RankReport({512, 0, 512}, 1);
  two.failed_updates = {2};
  two.failures = {"update 2: Aborted: decided by rank 1 (rank 2)"};
  two.verify_seconds = {0.5, 0, 0.125};
  ASSERT_OK(store->Put("s/report/0", ReportOf(0, zero)));
  ASSERT_OK(store->Put("s/report/1", ReportOf(1, one)));
  ASSERT_OK(store->Put("s/report/2", ReportOf(2, two)));
  ASSERT_OK_AND_ASSIGN(SelfTestReport total,
                       CollectReports(*store, "s", {"", "", ""}, {}));
  EXPECT_TRUE(total.verified);
  EXPECT_EQ(total.failed_updates, std::vector<uint64_t>({2}));
  EXPECT_EQ(total.failures,
            std::vector<std::string>({"update 2: Aborted: decided by rank 1"}));
  EXPECT_EQ(total.verified_regions, std::vector<uint64_t>({1024, 0, 1024}));
  EXPECT_EQ(total.verify_seconds, std::vector<double>({0.5, 0, 0.25}));
  EXPECT_EQ(total.opens, 1u);
  EXPECT_EQ(total.rejoins, 0u);
  EXPECT_EQ(total.ranks_ready, 3u);
}

TEST(LiveReportsTest, ARestartedRanksReportFollowsItsFirstProcesss) {
  testing::TempDir dir("reshard-live-reports");
  auto store = Must(OpenRendezvous(dir.path()));
  SelfTestReport source = RankReport({0, 0, 0, 0}, 1);
  source.rejoins = 1;
  SelfTestReport first = RankReport({512, 512}, 1);
  SelfTestReport again = RankReport({512, 512}, 0);
  ASSERT_OK(store->Put("s/report/0", ReportOf(0, source)));
  ASSERT_OK(store->Put("s/report/1", ReportOf(1, again)));
  const std::map<uint32_t, std::string> partials = {{1, ReportOf(1, first)}};
  ASSERT_OK_AND_ASSIGN(SelfTestReport total,
                       CollectReports(*store, "s", {"", ""}, partials));
  EXPECT_TRUE(total.verified);
  EXPECT_EQ(total.verified_regions,
            std::vector<uint64_t>({512, 512, 512, 512}));
  EXPECT_EQ(total.update_seconds, std::vector<double>({0.5, 0.5, 0.5, 0.5}));
  EXPECT_EQ(total.opens, 1u);
  EXPECT_EQ(total.rejoins, 1u);
  EXPECT_EQ(total.failed_updates, std::vector<uint64_t>());
  // A partial report that does not parse fails the run naming it.
  const std::map<uint32_t, std::string> bad = {{1, "{}"}};
  EXPECT_THAT(CollectReports(*store, "s", {"", ""}, bad),
              StatusIs(StatusCode::kAborted,
                       ::testing::StartsWith(
                           "live self-test failed: rank 1: InvalidArgument: "
                           "malformed report record s/partial-report/1: ")));
}

}  // namespace
}  // namespace reshard::internal
