// Internal to the live layer: one rank's part of a live session
// (LiveRank), shared by the one-shot RunLiveReshard (live_session.cc) and
// the standing LiveSession (standing_session.cc). The class is declared
// here; its bodies live by concept:
//   live_rank.cc          the lifecycle: run, open, update, rebind, abort
//   live_rank_publish.cc  publish, register, plan and bind, declarations
//   live_rank_exchange.cc this rank's share of the regions and its exchange
//   live_rank_outcome.cc  the fenced barrier, votes, the outcome, ready
// with its records (session_records.h), what the others published
// (live_world.h) and shadow targets (shadow_targets.h) in classes of
// their own.
#ifndef RESHARD_LIVE_LIVE_RANK_H_
#define RESHARD_LIVE_LIVE_RANK_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "live/device_mirrors.h"
#include "live/device_regions.h"
#include "live/heartbeat.h"
#include "live/live_delta.h"
#include "live/live_records.h"
#include "live/live_verify.h"
#include "live/live_world.h"
#include "live/session_records.h"
#include "live/shadow_targets.h"
#include "reshard/bound_plan.h"
#include "reshard/live.h"
#include "reshard/plan.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::live_internal {

using internal::RemoteRange;

// One rank's run of a session, in the lifecycle steps of
// include/reshard/live.h: RefuseRejoin, then Publish, PlanAndBind, Fence,
// Connect, Exchange, Complete, Barrier and Ready; Abort records a failure
// of any of them for the other ranks. Owns this rank's peer exchange
// (peer_exchange.h): a successful run releases it, a failed one abandons
// it rather than progressing or tearing it down.
class LiveRank {
 public:
  LiveRank(RecordStore& store, const WeightPlacementManifest& source,
           const WeightPlacementManifest& target, const LiveBindings& bindings,
           const LiveSessionOptions& options)
      : records_(store, options),
        store_(store),
        source_(source),
        target_(target),
        bindings_(bindings),
        options_(options),
        shadow_(options.session) {}

  LiveRank(const LiveRank&) = delete;
  LiveRank& operator=(const LiveRank&) = delete;

  ~LiveRank();

  // A rank joins a session once: records of its own from an earlier run
  // would be taken for this run's by the other ranks (and its writes would
  // fail). Nothing is recorded, so the earlier run's records stay as they
  // are.
  Status RefuseRejoin();

  // Every step in order; the first failure stops the run.
  Status Run();

  // A standing session's opening: publish, plan, bind and connect once.
  // Nothing moves until RunUpdate.
  Status Open();

  // Rejoin (LiveSessionOptions::rejoin): takes the seat of this rank's
  // earlier process, whose records (but those of updates) it removes, with
  // a new incarnation.
  Status TakeSeat();

  // Scopes the next RunUpdate's records and tags to try `attempt` of
  // `generation` (0 the first; every rank takes part in every try, so
  // each counts them alike), or, without one (a rank that rejoined and
  // has not counted), to the first try whose outcome is not recorded
  // (every failed try recorded its failure); takes the caller's version
  // tag for it (checked: CheckVersionTag).
  Status BeginUpdate(uint64_t generation, std::string tag,
                     std::optional<uint64_t> attempt);

  // One update: fence, exchange, verification, completion, barrier, ready.
  Status RunUpdate();

  // After a failed RunUpdate of a standing session: it failed alike on
  // every rank (the recorded outcome) with nothing of this rank in flight
  // and every other rank settled, so the session may go on.
  bool failed_certainly() const { return certain_; }

  // After a successful RunUpdate: what this rank's targets now hold.
  LiveVersion version() const;

  // Connections this rank's exchange made.
  uint64_t connections() const { return connections_; }
  // Ranks this rank reconnected to after they rejoined.
  uint64_t rejoins() const { return rejoins_; }

  // Takes `now` as this rank's bindings from the next update on. Changed
  // fragments are rebound locally: in push mode each side only ever uses
  // its own addresses, so the peers need not know. A pull session's
  // sources were registered (and their keys published) at open; a moved
  // source there is refused before any byte moves.
  Status Rebind(const LiveBindings& now);

  // When an update failed: operations left in flight with the exchange
  // (their buffers may still be read or written).
  uint64_t abandoned_in_flight() const { return abandoned_in_flight_; }
  const std::string& scope() const { return scope_; }
  // The update BeginUpdate scoped: its generation and try.
  uint64_t generation() const { return generation_; }
  uint64_t attempt() const { return attempt_; }
  SessionRecords& records() { return records_; }

  // Records `st` as this rank's abort and returns it. When another rank
  // failed first (its death or abort explains ours, e.g. an endpoint that
  // cannot connect to it), that cause is reported.
  // `final`: this rank gives up for good (AbortRecord::final).
  Status Abort(Status st, bool final = false);

  // "live session S, rank R[, update G]": the context of this rank's own
  // failures.
  std::string Where() const;

  // Stops this rank's heartbeat and removes its record (a rank leaving
  // the session cleanly).
  void StopHeartbeat();

  // Gives the exchange up once every rank closed (no peer reads this
  // rank's memory or sends to it any more), as the destructor would: it is
  // destroyed, releasing what it holds (opened CUDA IPC handles,
  // registrations, connections), or abandoned after a failed update.
  void ReleaseExchange();

  const LiveReport& report() const { return report_; }
  uint64_t delta_snapshot_bytes() const;

 private:
  Clock::time_point Deadline() const { return Clock::now() + options_.timeout; }
  void Stage(std::string_view stage) const {
    if (options_.on_stage) options_.on_stage(stage);
  }

  // live_rank_publish.cc
  // 1. Publish: bindings, the worker's address, the remote keys (pull),
  //    then the rank record (the marker the others wait for).
  Status Publish();

  // Pull (possibly, under kAuto): registers every source fragment and
  // publishes the keys.
  Status RegisterSources();

  // 2. Plan while the others publish; then read everybody's records,
  //    choose push or pull and bind the plan with everybody's bindings.
  Status PlanAndBind();

  // Every other rank's target declaration, through the caller's check.
  Status CheckDeclarations();

  // live_rank.cc
  // The generation and lease recheck of this rank's own participants,
  // against the bindings current right before execution.
  Status Fence();

  // live_rank_exchange.cc
  // 3. Connect: this rank's share of the regions, with an endpoint per
  //    peer it exchanges with, wired up before any transfer.
  Status Connect();

  // What this rank does with `br`: copy it (both ends here), send it, or
  // receive or read it; nothing when neither end is here. Small pushed
  // regions join the open batch of their peer and direction (both ends
  // walk the regions in plan order, so they form the same batches).
  Status TakeShareOf(const BoundRegion& br);

  // A message of its own, or a place in the peer's open batch of small
  // regions (a new batch once it would exceed kMaxCoalescedBytes).
  void AddMessage(const BoundRegion& br, uint32_t peer, ExchangeOp::Kind kind,
                  bool small);

  // Connects to rank `r` on first use.
  Status Peer(uint32_t r);

  // Pull: rank `r`'s key for the registered range holding `br`'s source,
  // read from its record once and unpacked once per range.
  Result<uint64_t> RemoteKey(uint32_t r, const BoundRegion& br);

  // 4. Exchange: local copies first (they need no peer), then the sends,
  //    receives and gets.
  Status Exchange();

  // live_rank_device.cc
  // The regions with both ends on this rank: on the host, or through
  // device_ where a side is device memory; each hashed once copied.
  Status CopyLocal();

  // An exchange that moves CUDA memory takes `b`'s CUDA fragments as
  // they are (device_regions.h): makes device_ on the first (and gives
  // shadow targets its device API), and refuses (naming the first
  // fragment) what the session cannot do on device memory: delta updates.
  Status DirectDevice(const LiveBindings& b);

  // Whether CUDA fragments of this session travel through the staged
  // pipeline (LiveSessionOptions::device_staging): by session-wide options
  // and the exchange's capabilities only, so every rank answers alike.
  bool PipelineStaging() const;
  // Under the pipeline, after every bind: which regions have a CUDA side
  // (from every rank's published bindings), and on the first such region
  // the exchange wrapped in the staged exchange (staged_exchange.h).
  Status StageDeviceRegions();
  // Under the pipeline, without a CUDA executor: `b`'s first CUDA
  // fragment refused as the bound plan refuses it over a host-only
  // exchange ("<exchange> executor cannot move cuda memory: ..."), before
  // anything is published.
  Status RequireStagingExecutor(const LiveBindings& b) const;

  // This rank's operations: in full, or (delta, after a delivered update)
  // as the changes since it; a full update of a delta session snapshots
  // what it sent.
  Status RunOps(const ExchangeRunOptions& xo, ExchangeStats* stats);

  // live_rank_tensor_moves.cc
  // Connect: the tensors the exchange moves whole (its TensorMover), the
  // same on every rank; none in delta, converting or shadow sessions.
  Status AdoptTensorMoves();
  // Whether `br`'s tensor is moved whole by the exchange.
  bool MovedWhole(const BoundRegion& br) const;
  // TakeShareOf for such a region: no operation; verification and the
  // connection its hash round needs.
  Status ShareMovedWhole(const BoundRegion& br, uint32_t from, uint32_t to);
  // Exchange: the mover's collective (every rank, every update), then the
  // moved regions' bytes and local hashes.
  Status RunTensorMoves(const ExchangeRunOptions& xo);

  // live_rank_outcome.cc
  // Standing sessions: every rank's fence passed before anybody posts an
  // operation, so a rank that refuses an update (a stale or moved binding,
  // refused tensors) fails it for everybody with nothing in flight.
  Status FencedBarrier();

  // Verification on arrival (live_verify.h), after this rank's exchange.
  Status Verify();

  // "region 7 (tensor t, target participant p) from rank 1 (host h)".
  std::string DescribeRegion(const BoundRegion& br, uint32_t peer) const;

  // A standing session's update failed before any byte moved or after
  // every byte arrived: records it as the update's outcome (unless a rank
  // did first), settles, and returns the failure as this rank saw it (or
  // as the deciding rank did). Also for a refusal of this rank's inputs
  // between BeginUpdate and RunUpdate (a moved binding, a conversion).
 public:
  Status FailUpdate(Status st);

 private:
  // Waits until every rank is past the update's exchange (its "done" or
  // "failed" vote, an abort, a close, or a silent heartbeat), so that no
  // rank still reads or writes another's buffers when this one returns.
  // Sets certain_ when it got there.
  Status Settle();

  // The fenced records of every rank: the update's tag (they must agree),
  // whether it is a delta update (every rank names the same base), and the
  // ranks that rejoined since this rank last connected to them.
  Status ReadFenced();

  // Waits for every rank's fenced record; a rank that left the session
  // (SessionRecords::Departure) is waited for up to rejoin_timeout.
  Status WaitFenced(const std::string& decision, Clock::time_point since);

  // Rank `r` rejoined (a new process): forgets the connection to the old
  // one, reads what the new one published, binds the plan again and
  // connects to it alone.
  Status Reconnect(uint32_t r);

  // This rank's share of `bound` (Connect's, again after a rebind).
  Status Reshare(BoundTransferPlan bound);

  // 5. Completion: the caller's validator, then "done".
  Status Complete();

  // 6. World barrier: the update's outcome, the same on every rank that
  //    gets here. The first rank that can tell records it create-only
  //    (outcome/0): commit once every rank voted "done"; abort when a rank
  //    failed before voting (its abort record), fell silent before voting
  //    (heartbeat.h), published a malformed vote, or the deadline passed.
  //    Every rank follows the recorded outcome, so an update never
  //    succeeds on some ranks and fails on others (a failure noticed after
  //    the commit, such as a peer that left after voting, does not undo
  //    it). Still progressing meanwhile: peers may still read from us.
  Status Barrier();

  // Every vote of `done` is a well-formed vote of its rank; *digest is
  // the update's (CombineDigests of the votes'; 0 without verification).
  Status CheckVotes(const std::string& done, uint64_t* digest);

  // Records `outcome` unless another rank recorded one first.
  Status Decide(const internal::OutcomeRecord& outcome,
                const std::string& decision);

  // The recorded outcome as this rank's result.
  Status Follow(const std::string& text, const std::string& decision,
                Clock::time_point since);

  // 7. Ready: target ranks record activation-ready.
  Status Ready();

  // `b` with its CUDA fragments replaced by their pinned host mirrors
  // (DeviceMirrors::Mirror; `adopt` as there), where the exchange moves
  // host memory only and a CUDA executor is available (the mirrors are
  // made on the first CUDA fragment adopted); `b` as it is where the
  // exchange moves CUDA memory (DirectDevice); else `b` as it is, and the
  // bound plan refuses its CUDA fragments by the exchange's memory kinds.
  Result<LiveBindings> Mirrored(const LiveBindings& b, bool adopt);

  SessionRecords records_;
  RecordStore& store_;
  const WeightPlacementManifest& source_;
  const WeightPlacementManifest& target_;
  LiveBindings bindings_;  // this rank's, as of the last (re)bind
  const LiveSessionOptions& options_;
  LiveReport report_;
  // Records of the current update: "" for a one-shot run (done/<r>,
  // ready/<r>), "u/<generation>/" in a standing session.
  std::string scope_;
  uint64_t generation_ = 0;  // of the current update; 0 outside updates
  uint64_t attempt_ = 0;     // its try (BeginUpdate)
  std::unique_ptr<Heartbeat> heartbeat_;
  uint32_t tag_ = 0;  // high 32 bits of this update's message tags
  Clock::time_point start_;
  double waited_seconds_ = 0;  // for the others to publish
  bool may_pull_ = false;      // by the options (before the world is known)
  bool pull_ = false;          // decided with the world's hosts
  bool succeeded_ = false;
  // Set when wire-up starts: from then on a failure gives the exchange up
  // (Abandon) instead of tearing it down, since peers may hold endpoints
  // to it or operations may be in flight. A failure before that (a
  // binding refused when the plan is bound) releases it normally.
  bool wired_ = false;
  uint64_t abandoned_in_flight_ = 0;
  // Shadow mode: the caller's target bindings and their shadows.
  ShadowTargets shadow_;
  // CUDA fragments over a host-only exchange: their pinned host mirrors
  // (Mirrored). Declared before the exchange: they outlive it.
  std::unique_ptr<DeviceMirrors> mirrors_;
  // CUDA fragments over an exchange that moves CUDA memory: this rank's
  // own copies and hashes of them on the device (DirectDevice).
  std::unique_ptr<DeviceRegions> device_;
  std::unique_ptr<PeerExchange> exchange_;
  // The pipeline (StageDeviceRegions): whether exchange_ is wrapped, and
  // by region index whether its messages are staged.
  bool staged_exchange_ = false;
  std::vector<uint8_t> staged_regions_;
  // delta: the snapshots and encodings; whether an update was delivered
  // (the next one sends deltas on its generation).
  std::optional<LiveDelta> delta_;
  bool delivered_ = false;
  uint64_t delivered_generation_ = 0;
  bool delta_round_ = false;  // this update sends deltas (ReadFenced)
  // verify: hashes and the check (live_verify.h).
  std::optional<LiveVerify> verify_;
  std::string tag_text_;           // the caller's tag for this update
  std::string agreed_tag_;         // the update's tag (ReadFenced)
  uint64_t digest_ = 0;            // the update's digest (its commit)
  uint64_t incarnation_ = 0;       // of this rank's process (rejoin)
  bool certain_ = false;           // failed_certainly()
  bool followed_failure_ = false;  // this update's recorded outcome failed
  uint64_t connections_ = 0;
  uint64_t rejoins_ = 0;
  uint64_t first_beat_ = 1;  // of this rank's heartbeat (TakeSeat)
  std::set<uint32_t> connected_;
  // The plan and this rank's share of it.
  std::optional<LogicalTransferPlan> plan_;
  std::optional<BoundTransferPlan> bound_;
  World world_;
  std::map<uint32_t, std::vector<RemoteRange>> ranges_;  // pull, by rank
  // Pull: imported keys by (rank, index of its range).
  std::map<std::pair<uint32_t, size_t>, uint64_t> unpacked_;
  std::vector<ExchangeOp> ops_;
  std::vector<const BoundRegion*> local_;
  // By plan tensor index: moved whole by the exchange (AdoptTensorMoves).
  std::vector<bool> moved_whole_;
  // Open batch of small regions per (peer, direction): op index, bytes.
  std::map<std::pair<uint32_t, int>, std::pair<size_t, uint64_t>> batches_;
};

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_RANK_H_
