// LiveRank (live_rank.h), steps 5 to 7 and the standing session's fenced
// barrier: votes, the update's recorded outcome, ready.
#include <algorithm>
#include <chrono>

#include "live/live_rank.h"

namespace reshard::live_internal {

Status LiveRank::FencedBarrier() {
  if (scope_.empty()) return Status::OK();
  RESHARD_RETURN_NOT_OK(
      records_.Put(records_.Key(scope_ + "fenced"),
                   internal::EncodeMarkerRecord(options_.rank)));
  const auto t0 = Clock::now();
  Status all =
      records_.WaitForAll(scope_ + "fenced", Deadline(), [&]() -> Status {
        RESHARD_RETURN_NOT_OK(exchange_->PeerFailure());
        exchange_->Progress(std::chrono::microseconds(200));
        return Status::OK();
      });
  report_.arrival_seconds = Seconds(t0);
  return all;
}

Status LiveRank::Complete() {
  Stage("completing");
  if (options_.validate_targets) {
    const auto t0 = Clock::now();
    Status valid = options_.validate_targets();
    report_.validate_seconds = Seconds(t0);
    RESHARD_RETURN_NOT_OK(valid);
  }
  RESHARD_RETURN_NOT_OK(
      records_.Put(records_.Key(scope_ + "done"),
                   internal::EncodeMarkerRecord(options_.rank)));
  Stage("done");
  return Status::OK();
}

Status LiveRank::Barrier() {
  const auto t1 = Clock::now();
  const std::string done = scope_ + "done";
  const std::string decision = records_.Key(scope_ + "outcome", 0);
  const auto deadline = Deadline();
  const auto voted = records_.Having(done);
  auto sleep = std::chrono::microseconds(200);
  while (true) {
    auto recorded = records_.Get(decision);
    if (recorded.ok()) return Follow(*recorded, decision, t1);
    if (!recorded.status().IsNotFound()) return recorded.status();
    RESHARD_ASSIGN_OR_RETURN(auto keys, records_.List(done));
    Status failed = Status::OK();
    if (keys.size() >= options_.ranks) {
      failed = CheckVotes(done);
      if (failed.ok()) {
        RESHARD_RETURN_NOT_OK(Decide({true, options_.rank, ""}, decision));
        continue;
      }
    }
    if (failed.ok()) failed = records_.CheckPeers(voted);
    if (failed.ok() && Clock::now() >= deadline) {
      std::string missing;
      for (uint32_t r = 0; r < options_.ranks; ++r) {
        if (!voted(r)) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
      }
      failed = Status::Unavailable(
          "live session " + options_.session + ": timed out after " +
          std::to_string(options_.timeout.count()) + " ms waiting for " + done +
          " of rank(s) " + missing);
    }
    if (!failed.ok()) {
      RESHARD_RETURN_NOT_OK(
          Decide({false, options_.rank, failed.ToString()}, decision));
      auto now = records_.Get(decision);
      if (now.ok()) {
        auto o = internal::DecodeOutcomeRecord(*now, decision, options_.ranks);
        // Ours was recorded: the failure as this rank saw it.
        if (o.ok() && !o->commit && o->decided_by == options_.rank) {
          report_.barrier_seconds = Seconds(t1);
          return failed;
        }
      }
      continue;
    }
    exchange_->Progress(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(5000));
  }
}

Status LiveRank::CheckVotes(const std::string& done) {
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    const std::string key = records_.Key(done, r);
    RESHARD_ASSIGN_OR_RETURN(std::string text, records_.Get(key));
    RESHARD_RETURN_NOT_OK(internal::DecodeMarkerRecord(text, key, r));
  }
  return Status::OK();
}

Status LiveRank::Decide(const internal::OutcomeRecord& outcome,
                        const std::string& decision) {
  const Status put =
      records_.Put(decision, internal::EncodeOutcomeRecord(outcome));
  return put.IsAlreadyExists() ? Status::OK() : put;
}

Status LiveRank::Follow(const std::string& text, const std::string& decision,
                        Clock::time_point since) {
  RESHARD_ASSIGN_OR_RETURN(auto outcome, internal::DecodeOutcomeRecord(
                                             text, decision, options_.ranks));
  report_.barrier_seconds = Seconds(since);
  if (outcome.commit) return Status::OK();
  return Status::Aborted(
      "live session " + options_.session + " failed as decided by rank " +
      std::to_string(outcome.decided_by) + ": " + outcome.reason);
}

Status LiveRank::Ready() {
  if (bindings_.targets.empty()) return Status::OK();
  RESHARD_RETURN_NOT_OK(
      records_.Put(records_.Key(scope_ + "ready"),
                   internal::EncodeMarkerRecord(options_.rank)));
  report_.ready = true;
  return Status::OK();
}

}  // namespace reshard::live_internal
