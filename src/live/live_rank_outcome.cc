// LiveRank (live_rank.h), steps 5 to 7 and the standing session's fenced
// barrier: votes, the update's recorded outcome, ready.
#include <algorithm>
#include <chrono>
#include <map>

#include "live/live_rank.h"

namespace reshard::live_internal {

Status LiveRank::FencedBarrier() {
  if (scope_.empty()) return Status::OK();
  RESHARD_RETURN_NOT_OK(records_.Put(
      records_.Key(scope_ + "fenced"),
      internal::EncodeFencedRecord({options_.rank,
                                    delivered_ ? delivered_generation_ : 0,
                                    incarnation_, tag_text_})));
  const std::string decision = records_.Key(scope_ + "outcome", 0);
  const auto t0 = Clock::now();
  Status all = WaitFenced(decision, t0);
  report_.arrival_seconds = Seconds(t0);
  RESHARD_RETURN_NOT_OK(all);
  return ReadFenced();
}

Status LiveRank::WaitFenced(const std::string& decision,
                            Clock::time_point since) {
  const std::string kind = scope_ + "fenced";
  auto deadline = Deadline();
  std::map<uint32_t, Clock::time_point> departed;  // since when
  auto sleep = std::chrono::microseconds(200);
  while (true) {
    RESHARD_ASSIGN_OR_RETURN(auto keys, records_.List(kind));
    std::vector<bool> fenced(options_.ranks, false);
    for (const std::string& key : keys) {
      RESHARD_ASSIGN_OR_RETURN(uint32_t r, records_.RankOfKey(key));
      fenced[r] = true;
    }
    if (keys.size() >= options_.ranks) return Status::OK();
    // A rank that failed its fence recorded the update's outcome.
    auto recorded = records_.Get(decision);
    if (recorded.ok()) return Follow(*recorded, decision, since);
    // A rank that closed the session ends it.
    RESHARD_RETURN_NOT_OK(records_.CheckClosed());
    const auto now = Clock::now();
    for (uint32_t r = 0; r < options_.ranks; ++r) {
      if (r == options_.rank || fenced[r]) continue;
      bool final = false;
      RESHARD_ASSIGN_OR_RETURN(auto why, records_.Departure(r, &final));
      if (why && final) {
        // Gone for good: the session cannot go on (saw_close).
        return records_.LeftForGood(r);
      }
      if (!why) {
        // Back (a new process) or never gone: the timeout runs anew.
        if (departed.erase(r) > 0) deadline = Deadline();
        continue;
      }
      const auto left = departed.try_emplace(r, now).first->second;
      if (now - left >= options_.rejoin_timeout) {
        return Status::Unavailable(
            "live session " + options_.session + ": rank " + std::to_string(r) +
            " left the session (" + *why + ") and did not rejoin within " +
            std::to_string(options_.rejoin_timeout.count()) + " ms");
      }
    }
    if (departed.empty() && now >= deadline) {
      return records_.WaitForAll(kind, now, nullptr);  // names the missing
    }
    exchange_->Progress(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(5000));
  }
}

Status LiveRank::ReadFenced() {
  agreed_tag_.clear();
  uint32_t tag_rank = 0;
  bool same_base = delivered_;
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    const std::string key = records_.Key(scope_ + "fenced", r);
    RESHARD_ASSIGN_OR_RETURN(std::string text, records_.Get(key));
    RESHARD_ASSIGN_OR_RETURN(auto fenced,
                             internal::DecodeFencedRecord(text, key, r));
    same_base = same_base && fenced.base == delivered_generation_;
    if (r != options_.rank && fenced.incarnation != world_.incarnations[r]) {
      RESHARD_RETURN_NOT_OK(Reconnect(r));
    }
    if (fenced.tag.empty()) continue;
    if (agreed_tag_.empty()) {
      agreed_tag_ = fenced.tag;
      tag_rank = r;
    } else if (fenced.tag != agreed_tag_) {
      return Status::InvalidArgument(
          "the ranks' version tags for the update differ: rank " +
          std::to_string(tag_rank) + " \"" + agreed_tag_ + "\", rank " +
          std::to_string(r) + " \"" + fenced.tag + "\"");
    }
  }
  // A delta update needs every rank's delta state at the same delivered
  // update (a rank that rejoined or a failed update makes it a full one).
  delta_round_ = delta_.has_value() && same_base;
  return Status::OK();
}

Status LiveRank::Complete() {
  Stage("completing");
  if (options_.validate_targets) {
    const auto t0 = Clock::now();
    Status valid = options_.validate_targets();
    report_.validate_seconds = Seconds(t0);
    RESHARD_RETURN_NOT_OK(valid);
  }
  internal::DoneRecord vote{options_.rank};
  if (verify_) {
    vote.digest = verify_->digest();
    vote.verified = verify_->verified();
  }
  RESHARD_RETURN_NOT_OK(records_.Put(records_.Key(scope_ + "done"),
                                     internal::EncodeDoneRecord(vote)));
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
      uint64_t digest = 0;
      failed = CheckVotes(done, &digest);
      if (failed.ok()) {
        RESHARD_RETURN_NOT_OK(
            Decide({true, options_.rank, "", digest}, decision));
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

Status LiveRank::CheckVotes(const std::string& done, uint64_t* digest) {
  std::vector<uint64_t> digests;
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    const std::string key = records_.Key(done, r);
    RESHARD_ASSIGN_OR_RETURN(std::string text, records_.Get(key));
    RESHARD_ASSIGN_OR_RETURN(auto vote,
                             internal::DecodeDoneRecord(text, key, r));
    digests.push_back(vote.digest);
  }
  *digest = options_.verify ? CombineDigests(digests) : 0;
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
  if (outcome.commit) {
    digest_ = outcome.digest;
    return Status::OK();
  }
  followed_failure_ = true;
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

Status LiveRank::FailUpdate(Status st) {
  const std::string decision = records_.Key(scope_ + "outcome", 0);
  if (!followed_failure_) {
    // Ours, unless a rank recorded the update's outcome first.
    st = st.WithContext(Where());
    Status decided = Decide({false, options_.rank, st.ToString()}, decision);
    if (!decided.ok()) return st;
    auto text = records_.Get(decision);
    if (!text.ok()) return st;
    auto outcome =
        internal::DecodeOutcomeRecord(*text, decision, options_.ranks);
    if (!outcome.ok()) return outcome.status();
    if (outcome->commit) {
      return Status::Internal(decision +
                              " records a commit this rank did not vote for");
    }
    if (outcome->decided_by != options_.rank) {
      st = Follow(*text, decision, Clock::now());
    }
  }
  delivered_ = false;  // the next update is a full one
  Status settled = Settle();
  if (!settled.ok()) return st.WithContext(settled.message());
  return st;
}

Status LiveRank::Settle() {
  const std::string done = scope_ + "done";
  const std::string failed = scope_ + "failed";
  if (!records_.Get(records_.Key(done)).ok()) {
    const Status put = records_.Put(
        records_.Key(failed), internal::EncodeMarkerRecord(options_.rank));
    if (!put.ok() && !put.IsAlreadyExists()) return put;
  }
  const auto deadline = Deadline();
  auto sleep = std::chrono::microseconds(200);
  while (true) {
    std::string missing;
    for (uint32_t r = 0; r < options_.ranks; ++r) {
      if (r == options_.rank || records_.Get(records_.Key(done, r)).ok() ||
          records_.Get(records_.Key(failed, r)).ok()) {
        continue;
      }
      RESHARD_ASSIGN_OR_RETURN(auto gone, records_.Departure(r));
      if (!gone) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    if (missing.empty()) {
      certain_ = true;
      return Status::OK();
    }
    if (Clock::now() >= deadline) {
      return Status::Unavailable("timed out after " +
                                 std::to_string(options_.timeout.count()) +
                                 " ms waiting for rank(s) " + missing +
                                 " to finish the failed update");
    }
    exchange_->Progress(sleep);
    sleep = std::min(sleep * 2, std::chrono::microseconds(5000));
  }
}

}  // namespace reshard::live_internal
