// The self-test's report records: what each rank writes, and the
// launcher's sum of them.

#include "selftest/live_reports.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "live/live_records.h"

namespace reshard::internal {

std::string SelfTestReportKey(const std::string& session, uint32_t rank) {
  return session + "/report/" + std::to_string(rank);
}

std::string SelfTestPartialReportKey(const std::string& session,
                                     uint32_t rank) {
  return session + "/partial-report/" + std::to_string(rank);
}

// Rank `r`'s report record: its outcome, or `error`.
std::string ReportOf(uint32_t r, const Result<SelfTestReport>& report) {
  internal::ReportRecord rec;
  rec.rank = r;
  if (!report.ok()) {
    rec.error = report.status().ToString();
    return EncodeReportRecord(rec);
  }
  rec.verified = report->verified;
  rec.ready = report->ranks_ready > 0;
  rec.bytes = report->bytes;
  rec.operations = report->operations;
  rec.messages = report->messages;
  rec.packed_messages = report->packed_messages;
  rec.plan_ns = static_cast<uint64_t>(report->plan_seconds * 1e9);
  rec.transfer_ns = static_cast<uint64_t>(report->seconds * 1e9);
  rec.open_ns = static_cast<uint64_t>(report->open_seconds * 1e9);
  auto nanos = [](const std::vector<double>& seconds) {
    std::vector<int64_t> out;
    for (double s : seconds) out.push_back(static_cast<int64_t>(s * 1e9));
    return out;
  };
  rec.update_ns = nanos(report->update_seconds);
  rec.encode_ns = nanos(report->encode_seconds);
  rec.apply_ns = nanos(report->apply_seconds);
  rec.verify_ns = nanos(report->verify_seconds);
  for (uint64_t w : report->wire_bytes) {
    rec.wire_bytes.push_back(static_cast<int64_t>(w));
  }
  for (uint64_t d : report->delta_regions) {
    rec.delta_regions.push_back(static_cast<int64_t>(d));
  }
  for (uint64_t f : report->full_regions) {
    rec.full_regions.push_back(static_cast<int64_t>(f));
  }
  for (uint64_t v : report->verified_regions) {
    rec.verified_regions.push_back(static_cast<int64_t>(v));
  }
  rec.snapshot_bytes = report->snapshot_bytes;
  rec.opens = report->opens;
  rec.rejoins = report->rejoins;
  for (uint64_t g : report->failed_updates) {
    rec.failed_updates.push_back(static_cast<int64_t>(g));
  }
  rec.failures = report->failures;
  rec.mismatch = report->mismatch;
  return EncodeReportRecord(rec);
}

namespace {

// Adds a rank's per-update counts into the ranks' totals.
void AddPerUpdate(const std::vector<int64_t>& rank,
                  std::vector<uint64_t>* total) {
  if (total->size() < rank.size()) total->resize(rank.size(), 0);
  for (size_t k = 0; k < rank.size(); ++k) {
    (*total)[k] += static_cast<uint64_t>(rank[k]);
  }
}

// Per update, the slowest rank's nanoseconds as seconds.
void MaxPerUpdate(const std::vector<int64_t>& rank,
                  std::vector<double>* slowest) {
  if (slowest->size() < rank.size()) slowest->resize(rank.size(), 0.0);
  for (size_t k = 0; k < rank.size(); ++k) {
    (*slowest)[k] = std::max((*slowest)[k], rank[k] / 1e9);
  }
}

// The ranks' reports summed, and why the run failed if it did: a rank that
// died or failed without a report, else a rank's own error (a malformed
// report is one), else an echo of another rank's abort.
class ReportCollector {
 public:
  ReportCollector() { total_.verified = true; }

  // Adds rank `r`'s report record (or its absence) and exit description;
  // `partial`, when given, is the report of the process that ran rank r
  // before it was killed and restarted (restart-rank).
  void Add(uint32_t r, const std::string& key, const Result<std::string>& text,
           const std::string& exit,
           const std::optional<Result<ReportRecord>>& partial) {
    const bool exited_ok = exit.empty();
    if (!text.ok()) {
      if (died_.empty()) {
        died_ = "rank " + std::to_string(r) + " " +
                (exited_ok ? "exited with status 0 but left no report" : exit);
      }
      return;
    }
    auto rec = internal::DecodeReportRecord(*text, key, r);
    if (rec.ok() && partial) {
      if (partial->ok()) {
        PrependPartial(**partial, &*rec);
      } else {
        rec = partial->status();
      }
    }
    std::string error;
    if (!rec.ok()) {
      error = rec.status().ToString();
    } else if (!rec->error.empty()) {
      error = rec->error;
    } else if (!exited_ok) {
      // A rank that did not exit with status 0 fails the run whatever its
      // report says.
      error = exit + " (its report record holds no error)";
    }
    if (!error.empty()) {
      const bool echo = rec.ok() && !rec->error.empty() &&
                        error.find("aborted by rank") != std::string::npos;
      std::string& slot = echo ? other_ : root_cause_;
      if (slot.empty()) slot = "rank " + std::to_string(r) + ": " + error;
      return;
    }
    total_.verified = total_.verified && rec->verified;
    if (total_.mismatch.empty()) total_.mismatch = rec->mismatch;
    total_.bytes += rec->bytes;
    total_.operations += rec->operations;
    total_.messages += rec->messages;
    total_.packed_messages += rec->packed_messages;
    total_.ranks_ready += rec->ready ? 1 : 0;
    total_.seconds = std::max(total_.seconds, rec->transfer_ns / 1e9);
    total_.open_seconds = std::max(total_.open_seconds, rec->open_ns / 1e9);
    MaxPerUpdate(rec->update_ns, &total_.update_seconds);
    MaxPerUpdate(rec->encode_ns, &total_.encode_seconds);
    MaxPerUpdate(rec->apply_ns, &total_.apply_seconds);
    AddPerUpdate(rec->wire_bytes, &total_.wire_bytes);
    AddPerUpdate(rec->delta_regions, &total_.delta_regions);
    AddPerUpdate(rec->full_regions, &total_.full_regions);
    AddPerUpdate(rec->verified_regions, &total_.verified_regions);
    MaxPerUpdate(rec->verify_ns, &total_.verify_seconds);
    total_.snapshot_bytes += rec->snapshot_bytes;
    total_.opens = std::max(total_.opens, rec->opens);
    total_.rejoins = std::max(total_.rejoins, rec->rejoins);
    // Every rank fails alike: the lowest rank's message stands.
    for (size_t i = 0; i < rec->failed_updates.size(); ++i) {
      failures_.emplace(rec->failed_updates[i], rec->failures[i]);
    }
  }

  // The summed report, or Aborted naming the root cause. A rank whose
  // targets differ aborts the others: that is reported as the mismatch.
  Result<SelfTestReport> Finish() && {
    if (!died_.empty() || !root_cause_.empty() ||
        (!other_.empty() && total_.mismatch.empty())) {
      return Status::Aborted("live self-test failed: " + (!died_.empty() ? died_
                                                          : !root_cause_.empty()
                                                              ? root_cause_
                                                              : other_));
    }
    if (!total_.mismatch.empty()) total_.verified = false;
    for (const auto& [generation, failure] : failures_) {
      total_.failed_updates.push_back(static_cast<uint64_t>(generation));
      total_.failures.push_back(failure);
    }
    return std::move(total_);
  }

 private:
  // A restarted rank's report: what its first process ran, then the rest.
  static void PrependPartial(const ReportRecord& first, ReportRecord* rec) {
    for (auto [from, to] :
         {std::pair{&first.update_ns, &rec->update_ns},
          std::pair{&first.wire_bytes, &rec->wire_bytes},
          std::pair{&first.delta_regions, &rec->delta_regions},
          std::pair{&first.full_regions, &rec->full_regions},
          std::pair{&first.encode_ns, &rec->encode_ns},
          std::pair{&first.apply_ns, &rec->apply_ns},
          std::pair{&first.verified_regions, &rec->verified_regions},
          std::pair{&first.verify_ns, &rec->verify_ns},
          std::pair{&first.failed_updates, &rec->failed_updates}}) {
      to->insert(to->begin(), from->begin(), from->end());
    }
    rec->failures.insert(rec->failures.begin(), first.failures.begin(),
                         first.failures.end());
    rec->opens += first.opens;
    rec->open_ns = std::max(rec->open_ns, first.open_ns);
    rec->rejoins = std::max(rec->rejoins, first.rejoins);
    rec->transfer_ns = first.transfer_ns == 0
                           ? rec->transfer_ns
                           : std::min(rec->transfer_ns, first.transfer_ns);
  }

  SelfTestReport total_;
  std::map<int64_t, std::string> failures_;
  std::string died_, root_cause_, other_;
};

}  // namespace

// Reads every rank's report record after the ranks have ended, each after
// the partial report of the process it replaced, if any (`partials`, by
// rank: the records' text).
Result<SelfTestReport> CollectReports(
    RecordStore& store, const std::string& session,
    const std::vector<std::string>& exits,
    const std::map<uint32_t, std::string>& partials) {
  ReportCollector collector;
  for (uint32_t r = 0; r < exits.size(); ++r) {
    const std::string key = SelfTestReportKey(session, r);
    std::optional<Result<ReportRecord>> partial;
    if (auto it = partials.find(r); it != partials.end()) {
      partial = internal::DecodeReportRecord(
          it->second, SelfTestPartialReportKey(session, r), r);
    }
    collector.Add(r, key, store.Get(key), exits[r], partial);
  }
  return std::move(collector).Finish();
}

}  // namespace reshard::internal
