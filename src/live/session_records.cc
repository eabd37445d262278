#include "live/session_records.h"

#include <algorithm>
#include <set>
#include <thread>

#include "live/live_records.h"

namespace reshard::live_internal {

std::string_view SessionRecords::RankComponent(std::string_view key) const {
  std::string_view rest = key.substr(prefix_.size());
  if (rest.starts_with("u/")) {
    rest.remove_prefix(2);
    rest.remove_prefix(std::min(rest.size(), rest.find('/') + 1));
  }
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return {};
  rest.remove_prefix(slash + 1);
  return rest.substr(0, rest.find('/'));
}

Result<uint32_t> SessionRecords::RankOfKey(std::string_view key) const {
  const std::string_view digits = RankComponent(key);
  uint64_t r = 0;
  bool ok = !digits.empty() && digits.size() <= 10 &&
            (digits.size() == 1 || digits[0] != '0');
  for (char c : digits) {
    ok = ok && c >= '0' && c <= '9';
    r = r * 10 + static_cast<uint64_t>(c - '0');
  }
  if (!ok || r >= options_.ranks) {
    return Status::InvalidArgument(
        "live session " + options_.session + ": record " + std::string(key) +
        " names no rank of " + std::to_string(options_.ranks));
  }
  return static_cast<uint32_t>(r);
}

Result<std::vector<std::string>> SessionRecords::OwnRecords() {
  RESHARD_ASSIGN_OR_RETURN(auto keys, store_.List(prefix_));
  const std::string me = std::to_string(options_.rank);
  std::vector<std::string> own;
  for (const std::string& key : keys) {
    if (RankComponent(key) == me) own.push_back(key);
  }
  return own;
}

Status SessionRecords::Abort(const Status& st, uint64_t generation,
                             bool final) {
  (void)store_.Put(Key("abort"),
                   internal::EncodeAbortRecord(options_.rank, st.ToString(),
                                               generation, final));
  return st;
}

std::function<bool(uint32_t)> SessionRecords::Having(const std::string& kind) {
  return [this, kind](uint32_t r) { return Get(Key(kind, r)).ok(); };
}

Status SessionRecords::CheckAborts(
    const std::function<bool(uint32_t)>& exempt) {
  RESHARD_ASSIGN_OR_RETURN(auto keys, List("abort"));
  for (const std::string& key : keys) {
    RESHARD_ASSIGN_OR_RETURN(uint32_t who, RankOfKey(key));
    if (who == options_.rank) continue;
    if (exempt && exempt(who)) continue;
    // Whatever the record holds, the session is over; a malformed record
    // is reported as the reason.
    std::string reason;
    auto text = store_.Get(key);
    if (!text.ok()) {
      reason = "(unreadable reason: " + text.status().ToString() + ")";
    } else {
      auto decoded = internal::DecodeAbortRecord(*text, key, who);
      reason = decoded.ok() ? *decoded : decoded.status().ToString();
    }
    return Status::Aborted("live session " + options_.session +
                           " aborted by rank " + std::to_string(who) + ": " +
                           reason);
  }
  return Status::OK();
}

void SessionRecords::WatchPeers() {
  if (options_.heartbeat_interval.count() == 0) return;
  watch_.emplace(store_, prefix_, options_.rank, options_.ranks,
                 options_.peer_timeout);
}

Status SessionRecords::CheckClosed(
    const std::function<bool(uint32_t)>& exempt) {
  const auto now = Clock::now();
  if (now < next_closed_list_) return Status::OK();
  next_closed_list_ = now + std::chrono::milliseconds(20);
  RESHARD_ASSIGN_OR_RETURN(auto keys, List("closed"));
  for (const std::string& key : keys) {
    RESHARD_ASSIGN_OR_RETURN(uint32_t who, RankOfKey(key));
    if (who == options_.rank) continue;
    if (exempt && exempt(who)) continue;
    auto text = store_.Get(key);
    if (text.status().IsNotFound()) continue;  // removed since the List
    RESHARD_RETURN_NOT_OK(text.status());
    RESHARD_ASSIGN_OR_RETURN(auto closed,
                             internal::DecodeClosedRecord(*text, key, who));
    saw_close_ = true;
    return Status::Aborted("live session " + options_.session + ": rank " +
                           std::to_string(who) + " closed the session after " +
                           std::to_string(closed.updates) +
                           (closed.updates == 1 ? " update" : " updates"));
  }
  return Status::OK();
}

Status SessionRecords::CheckSilent(
    const std::function<bool(uint32_t)>& exempt) {
  if (!watch_) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(auto silent, watch_->FirstSilent(exempt));
  if (!silent) return Status::OK();
  return Status::Unavailable(
      "live session " + options_.session + ": rank " + std::to_string(*silent) +
      " stopped answering (no heartbeat for " +
      std::to_string(watch_->SilentMillis(*silent)) + " ms; it died or hangs)");
}

Status SessionRecords::LeftForGood(uint32_t r) {
  saw_close_ = true;
  auto others = [r](uint32_t x) { return x != r; };
  next_closed_list_ = {};
  RESHARD_RETURN_NOT_OK(CheckClosed(others));
  RESHARD_RETURN_NOT_OK(CheckAborts(others));
  return Status::Aborted("live session " + options_.session + ": rank " +
                         std::to_string(r) + " left the session");
}

Result<std::optional<std::string>> SessionRecords::Departure(uint32_t r,
                                                             bool* final) {
  if (final != nullptr) *final = false;
  const std::string abort_key = Key("abort", r);
  auto abort = Get(abort_key);
  if (abort.ok()) {
    auto record = internal::DecodeAbort(*abort, abort_key, r);
    // A malformed record is taken for a final one.
    if (final != nullptr) *final = !record.ok() || record->final;
    return std::optional<std::string>(
        "it recorded an abort: " +
        (record.ok() ? record->reason : record.status().ToString()));
  }
  if (Get(Key("closed", r)).ok()) {
    if (final != nullptr) *final = true;
    return std::optional<std::string>("it closed the session");
  }
  if (!watch_) return std::optional<std::string>();
  RESHARD_ASSIGN_OR_RETURN(
      auto silent, watch_->FirstSilent([r](uint32_t x) { return x != r; }));
  if (!silent) return std::optional<std::string>();
  return std::optional<std::string>("no heartbeat for " +
                                    std::to_string(watch_->SilentMillis(r)) +
                                    " ms; it died or hangs");
}

Status SessionRecords::CheckPeers(const std::function<bool(uint32_t)>& exempt) {
  RESHARD_RETURN_NOT_OK(CheckAborts(exempt));
  RESHARD_RETURN_NOT_OK(CheckClosed(exempt));
  return CheckSilent(exempt);
}

Status SessionRecords::WaitForAll(std::string_view kind,
                                  Clock::time_point deadline,
                                  const std::function<Status()>& poll) {
  auto sleep = std::chrono::microseconds(200);
  while (true) {
    RESHARD_ASSIGN_OR_RETURN(auto keys, List(kind));
    for (const std::string& key : keys) {
      RESHARD_RETURN_NOT_OK(RankOfKey(key).status());
    }
    if (keys.size() >= options_.ranks) return Status::OK();
    RESHARD_RETURN_NOT_OK(CheckAborts());
    // A rank that passed this barrier may close before this rank's next
    // look sees its record (the "opened" barrier, then Close at once):
    // that is no early close.
    RESHARD_RETURN_NOT_OK(CheckClosed(Having(std::string(kind))));
    RESHARD_RETURN_NOT_OK(CheckSilent());
    if (poll) RESHARD_RETURN_NOT_OK(poll());
    if (Clock::now() >= deadline) return WaitTimedOut(kind, keys);
    if (!poll) {
      std::this_thread::sleep_for(sleep);
      sleep = std::min(sleep * 2, std::chrono::microseconds(10000));
    }
  }
}

Status SessionRecords::WaitTimedOut(
    std::string_view kind, const std::vector<std::string>& keys) const {
  std::set<std::string> have(keys.begin(), keys.end());
  std::string missing;
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    if (!have.count(Key(kind, r))) {
      missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
  }
  return Status::Unavailable(
      "live session " + options_.session + ": timed out after " +
      std::to_string(options_.timeout.count()) + " ms waiting for " +
      (kind == "rank" ? std::string("the published bindings")
                      : std::string(kind)) +
      " of rank(s) " + missing);
}

}  // namespace reshard::live_internal
