// Internal to the live layer: SessionRecords, one rank's view of a live
// session's records in the rendezvous (keys, votes, aborts, closes,
// heartbeats and the barrier that waits for every rank's record of a
// kind).
#ifndef RESHARD_LIVE_SESSION_RECORDS_H_
#define RESHARD_LIVE_SESSION_RECORDS_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "live/heartbeat.h"
#include "reshard/live.h"
#include "reshard/sdk/record_store.h"

namespace reshard::live_internal {

using Clock = std::chrono::steady_clock;

// One rank's view of the records of its session: every key lies under
// "<session>/", and those of a rank end in its number
// (<kind>/<r>[/...] or u/<generation>/<kind>/<r>[/...]).
class SessionRecords {
 public:
  SessionRecords(RecordStore& store, const LiveSessionOptions& options)
      : store_(store), options_(options), prefix_(options.session + "/") {}

  std::string Key(std::string_view kind, uint32_t rank) const {
    return prefix_ + std::string(kind) + "/" + std::to_string(rank);
  }
  std::string Key(std::string_view kind) const {
    return Key(kind, options_.rank);
  }

  Status Put(const std::string& key, std::string_view value) {
    return store_.Put(key, value);
  }
  Result<std::string> Get(const std::string& key) { return store_.Get(key); }
  Result<std::vector<std::string>> List(std::string_view kind) {
    return store_.List(prefix_ + std::string(kind) + "/");
  }

  // The rank component of a key of this session, <kind>/<r>[/...] or
  // u/<generation>/<kind>/<r>[/...]; empty when the key has none.
  std::string_view RankComponent(std::string_view key) const;

  // The rank a key of kind/<r>[/...] (or u/<generation>/kind/<r>[/...])
  // belongs to; an error for a key that names no rank of this session (a
  // stray or forged record).
  Result<uint32_t> RankOfKey(std::string_view key) const;

  // This rank's records under the session (any kind, any update).
  Result<std::vector<std::string>> OwnRecords();

  // Records this rank's failure in update `generation` (0: opening or a
  // one-shot run) for the others (first reason wins) and returns `st`.
  // `final`: AbortRecord::final.
  Status Abort(const Status& st, uint64_t generation, bool final = false);

  // A predicate over ranks: those with a record of `kind`.
  std::function<bool(uint32_t)> Having(const std::string& kind);

  // An error if another rank aborted, unless `exempt` excuses it (a rank
  // that voted "done" in the update being decided before it failed: its
  // failure does not decide that update).
  Status CheckAborts(const std::function<bool(uint32_t)>& exempt = nullptr);

  // Watches the other ranks' heartbeats from now on (heartbeat.h).
  void WatchPeers();

  // Rank `r` rejoined: its heartbeat is judged anew (PeerWatch::Forget).
  void ForgetPeer(uint32_t r) {
    if (watch_) watch_->Forget(r);
  }

  // An error naming the first other rank that closed the session (its
  // closed record), unless `exempt` excuses it: a standing session's rank
  // that closed after fewer updates than this one never joins this
  // update, so it is named at once, like a dead one, rather than waited
  // for until the timeout. Lists the closed records at most every 20 ms
  // (they only matter to a rank that waits).
  Status CheckClosed(const std::function<bool(uint32_t)>& exempt = nullptr);

  // Whether CheckClosed or LeftForGood ever named a rank that left the
  // session for good (it closed it or recorded a final abort): the
  // session cannot go on.
  bool saw_close() const { return saw_close_; }

  // The error naming rank `r`, which left the session for good
  // (Departure's *final): CheckClosed's for a rank that closed, CheckAborts'
  // for a final abort; saw_close() is true from then on.
  Status LeftForGood(uint32_t r);

  // An error naming the first rank whose heartbeat stood still for
  // peer_timeout, unless `exempt` excuses it.
  Status CheckSilent(const std::function<bool(uint32_t)>& exempt = nullptr);

  // Why rank `r` left the session ("it recorded an abort: <reason>", "no
  // heartbeat for N ms"), or nullopt while it is in it; *final when it
  // left for good (a final abort, a close) and no process will take its
  // place.
  Result<std::optional<std::string>> Departure(uint32_t r,
                                               bool* final = nullptr);

  // CheckAborts, CheckClosed, then CheckSilent; `exempt` excuses ranks of
  // all three.
  Status CheckPeers(const std::function<bool(uint32_t)>& exempt = nullptr);

  // Waits until every rank has a record of `kind`, polling aborts and
  // `poll` (endpoint health, progress) in between.
  Status WaitForAll(std::string_view kind, Clock::time_point deadline,
                    const std::function<Status()>& poll);

 private:
  // The error of a wait for `kind` that timed out, naming the ranks
  // missing from `keys`.
  Status WaitTimedOut(std::string_view kind,
                      const std::vector<std::string>& keys) const;

  RecordStore& store_;
  const LiveSessionOptions& options_;
  std::string prefix_;
  std::optional<PeerWatch> watch_;
  Clock::time_point next_closed_list_{};
  bool saw_close_ = false;
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_SESSION_RECORDS_H_
