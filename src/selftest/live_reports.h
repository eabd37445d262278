// The self-test's report records (live runs): each rank writes its own
// under <session>/report/<r>; the launcher sums them into one report.

#ifndef RESHARD_SELFTEST_LIVE_REPORTS_H_
#define RESHARD_SELFTEST_LIVE_REPORTS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "reshard/sdk/record_store.h"
#include "reshard/status.h"
#include "selftest/selftest.h"

namespace reshard::internal {

// Rank `rank`'s report record: <session>/report/<rank>.
std::string SelfTestReportKey(const std::string& session, uint32_t rank);

// restart-rank: the report of the updates a rank ran before it was killed,
// <session>/partial-report/<rank> (the new process in its place writes
// SelfTestReportKey; it removes this record when it rejoins, so the
// launcher reads it before starting that process).
std::string SelfTestPartialReportKey(const std::string& session, uint32_t rank);

// Rank `r`'s report record: its outcome, or `report`'s error.
std::string ReportOf(uint32_t r, const Result<SelfTestReport>& report);

// The ranks' reports summed once the ranks have ended: `exits` holds, per
// rank, how it ended when that was not a clean exit ("" otherwise), and
// `partials`, by rank, the partial report (text) of a process that was
// killed and started again: its updates come before the new process's.
// Counts are summed over the ranks, times are the slowest rank's, opens
// and rejoins the most any rank saw, and each failed update's failure the
// lowest rank's. Fails (Aborted) naming the root cause when a rank died or
// failed without a report, or reported an error.
Result<SelfTestReport> CollectReports(
    RecordStore& store, const std::string& session,
    const std::vector<std::string>& exits,
    const std::map<uint32_t, std::string>& partials);

}  // namespace reshard::internal

#endif  // RESHARD_SELFTEST_LIVE_REPORTS_H_
