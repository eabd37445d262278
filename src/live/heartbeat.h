// Liveness of a session's ranks through its rendezvous, so that a rank
// that dies (killed, crashed, its host gone) is named by the others within
// about `timeout`, not at the session timeout, whether or not they
// exchange bytes with it.
//
// Each rank runs a Heartbeat: a thread that publishes
// <session>/alive/<r>/<n> with n counting up every `interval` and removes
// the previous record (records are create-only). Every other rank's
// PeerWatch lists those keys now and then and declares a rank silent once
// its counter has not moved for `timeout` on the watcher's own clock (no
// clock is shared between hosts). A rank is judged only after its first
// heartbeat was seen; one never seen is left to the session timeout.

#ifndef RESHARD_LIVE_HEARTBEAT_H_
#define RESHARD_LIVE_HEARTBEAT_H_

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "reshard/sdk/record_store.h"
#include "reshard/status.h"

namespace reshard::live_internal {

// Move-only owner of the beating thread; stops it on destruction.
class Heartbeat {
 public:
  // Publishes the first beat before returning (an error if that Put
  // fails), then beats every `interval` until Stop. `prefix` is
  // "<session>/".
  // The counter starts at `first` (a process that takes the place of an
  // earlier one of the same rank starts above every counter the watchers
  // saw of it, so they see it move).
  static Result<std::unique_ptr<Heartbeat>> Start(
      RecordStore& store, std::string prefix, uint32_t rank,
      std::chrono::milliseconds interval, uint64_t first = 1);

  Heartbeat(const Heartbeat&) = delete;
  Heartbeat& operator=(const Heartbeat&) = delete;
  ~Heartbeat();

  // Stops beating and, when `remove` is set, removes the last record (a
  // rank that leaves the session cleanly); a stopped rank's last record
  // otherwise stays, and its watchers find it silent. Idempotent.
  void Stop(bool remove);

  // Beats published so far.
  uint64_t beats() const;

 private:
  Heartbeat(RecordStore& store, std::string prefix, uint32_t rank,
            std::chrono::milliseconds interval);
  std::string Key(uint64_t n) const;
  void Run();

  RecordStore& store_;
  const std::string prefix_;
  const uint32_t rank_;
  const std::chrono::milliseconds interval_;
  mutable std::mutex mu_;
  std::condition_variable wake_;
  bool stop_ = false;
  uint64_t beat_ = 0;  // the published record's counter
  std::thread thread_;
};

class PeerWatch {
 public:
  // Watches every rank of [0, ranks) but `self`.
  PeerWatch(RecordStore& store, std::string prefix, uint32_t self,
            uint32_t ranks, std::chrono::milliseconds timeout);

  // The first rank (lowest number) whose heartbeat has been still for
  // longer than the timeout, among those `exempt` does not excuse; lists
  // the heartbeats at most every timeout / 8 (between lists it answers
  // from what it saw). An error for a heartbeat key that names no rank of
  // the session or carries no counter.
  Result<std::optional<uint32_t>> FirstSilent(
      const std::function<bool(uint32_t rank)>& exempt);

  // Rank `r` is a new process (it rejoined): what was seen of the earlier
  // one no longer counts; it is judged from its first heartbeat seen.
  void Forget(uint32_t r);

  // For messages: how long rank `r` has been silent, in milliseconds.
  int64_t SilentMillis(uint32_t r) const;

 private:
  using Clock = std::chrono::steady_clock;
  struct Seen {
    bool seen = false;
    uint64_t beat = 0;
    Clock::time_point changed;
  };
  Status Refresh(Clock::time_point now);

  RecordStore& store_;
  const std::string prefix_;
  const uint32_t self_;
  const std::chrono::milliseconds timeout_;
  std::vector<Seen> seen_;
  Clock::time_point next_list_{};
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_HEARTBEAT_H_
