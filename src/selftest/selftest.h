// End-to-end self-test with real bytes: allocate host memory for every
// participant of both layouts, fill every source element with a pattern
// derived from its tensor and global element index, reshard, and check
// every target byte.

#ifndef RESHARD_SELFTEST_SELFTEST_H_
#define RESHARD_SELFTEST_SELFTEST_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "reshard/conversion.h"
#include "reshard/live.h"
#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

// Where the self-test injects a fault (tests of the failure paths).
enum class SelfTestFault : uint8_t {
  kNone,
  kKillSource,          // the first source rank dies (SIGKILL) mid-transfer
  kKillTarget,          // the first target rank dies (SIGKILL) mid-transfer
  kStaleGeneration,     // the first source rank's generation moves on after
                        // publication, before execution
  kKillBetweenUpdates,  // updates >= 2: the first source rank dies after
                        // update 1, before update 2
  kOverwriteTargets,    // updates >= 2: every target rank overwrites its
                        // target buffers after update 1 (delta: the next
                        // update must send those regions whole)
  kCorruptMessage,      // updates >= 3, procs >= 2: the first target rank
                        // flips one byte of the first region it received
                        // from another rank in update 2
                        // (LiveSessionOptions::corrupt_received_in_update):
                        // update 2 fails on every rank, the session goes on
  kRestartRank,         // updates >= 3, procs >= 2, ucx launcher: the first
                        // target rank dies (SIGKILL) after update 2 and
                        // the launcher starts a new process in its place
                        // (LiveSessionOptions::rejoin) for updates 3..K
};

struct SelfTestOptions {
  // "local" (one process), "ucx" (`procs` processes) or "inproc" (`procs`
  // ranks as threads of this process, over the in-process peer exchange:
  // the live session without UCX; no --rank, no killed ranks). What this
  // header says of ucx holds for inproc too.
  std::string transport = "local";
  uint32_t threads = 1;
  // ucx: number of processes. Sources go to the first half of the ranks,
  // targets to the second half (everything on rank 0 when procs is 1). At
  // most 64, and at most the participants with fragments of both
  // placements together.
  uint32_t procs = 2;
  // ucx: rendezvous shared by the ranks, a directory or fs://DIR (other
  // schemes are refused); empty: a fresh temporary directory, removed
  // afterwards.
  std::string rendezvous;
  // ucx: session key (default: unique per run). A session is used once:
  // a launcher run refuses a session with records, a rank one with records
  // of its own.
  std::string session;
  // ucx: run only this rank in the calling process (the other ranks run
  // elsewhere with the same placements, rendezvous and session).
  std::optional<uint32_t> rank;
  // ucx: longest wait on any peer.
  std::chrono::milliseconds timeout{60000};
  // ucx: send operations in flight per rank.
  uint32_t max_in_flight = 64;
  // ucx: sources push (tagged messages) or targets pull (RMA get).
  LiveProtocol protocol = LiveProtocol::kAuto;
  // The exchange's own settings (LiveSessionOptions::exchange_options).
  PeerExchangeOptions exchange_options;
  SelfTestFault fault = SelfTestFault::kNone;
  // ucx: 0, one RunLiveReshard; K >= 1, one standing LiveSession with K
  // updates, the source pattern of update k depending on k, every target
  // byte verified after each.
  uint32_t updates = 0;
  // When set (a store URI, e.g. fs://DIR): upload the source layout to the
  // weight store, commit, load the revision into the target layout and
  // check every byte. Each run uses a namespace of its own
  // ("selftest-<pid>-<time>"); the revision is removed afterwards unless
  // keep_revision.
  std::string via_store;
  bool keep_revision = false;
  // Called with the phase ("fill", "transfer", "verify": the fraction of
  // its bytes done; "updates" with --updates: the fraction of the updates
  // done, from rank 0's process or thread); may be empty.
  std::function<void(std::string_view phase, double fraction)> progress;
  // Measure the memcpy baseline (skipped when false).
  bool measure_memcpy = true;
  // Tensors whose dtype differs convert (PlanOptions::convert,
  // LiveSessionOptions::convert; docs/conversion.md); converting targets
  // are checked against the pattern converted independently of the path.
  bool convert = false;
  Fp8Block fp8_block;
  // updates >= 2 (ucx, inproc): delta updates (LiveSessionOptions::delta).
  bool delta = false;
  uint32_t delta_threads = 0;  // LiveSessionOptions::delta_threads
  // Live runs: every received region checked against its source's hash
  // (LiveSessionOptions::verify); false measures the session without it.
  bool verify = true;
  // updates: the fraction of elements each update from the second on
  // changes (deterministic per generation; SelfTestElementGeneration); 1
  // changes all. In [0, 1]; not with convert.
  double change_fraction = 1.0;
  // updates: how long the other ranks wait for a dead rank to rejoin
  // (LiveSessionOptions::rejoin_timeout).
  std::chrono::milliseconds rejoin_timeout{30000};
};

struct SelfTestReport {
  bool verified = false;
  uint64_t bytes = 0;       // bytes written to targets
  uint64_t operations = 0;  // strided operations executed
  uint64_t segments = 0;    // rows under the row-by-row geometry
  double plan_seconds = 0;  // planning + binding
  double seconds = 0;       // the transfer itself
  // memcpy bandwidth of this machine measured in the same run, with as
  // many threads as the transfer (the baseline to compare against).
  double memcpy_gbps = 0;
  // Empty when verified; else names the first wrong tensor, fragment,
  // element and byte.
  std::string mismatch;
  // ucx: messages sent between processes plus RMA gets issued, and how
  // many message sides were packed (strided); ranks that reported
  // activation-ready.
  uint64_t messages = 0;
  // via_store: upload (prepare + payloads + commit) and load seconds.
  double upload_seconds = 0;
  double load_seconds = 0;
  uint64_t packed_messages = 0;
  uint32_t ranks_ready = 0;
  // updates >= 1: the slowest rank's Open and each Update call, seconds.
  double open_seconds = 0;
  std::vector<double> update_seconds;
  // ucx: bytes that crossed between processes, summed over the ranks: one
  // entry per update (one for a single reshard). With convert, FP8 that
  // quantized at the source travels as FP8.
  std::vector<uint64_t> wire_bytes;
  // delta: regions received as changes and whole, summed over the ranks,
  // per update; the ranks' snapshot bytes, summed.
  std::vector<uint64_t> delta_regions;
  std::vector<uint64_t> full_regions;
  // delta: per update, the slowest rank's seconds encoding what it sent
  // and hashing and applying what it received.
  std::vector<double> encode_seconds;
  std::vector<double> apply_seconds;
  uint64_t snapshot_bytes = 0;
  // Live runs (verification on arrival): regions the targets checked
  // against their source's hash, summed over the ranks, and the slowest
  // rank's seconds verifying; one entry per update (one for a single
  // reshard). A failed update's entries, here and in every per-update
  // list above, are 0.
  std::vector<uint64_t> verified_regions;
  std::vector<double> verify_seconds;
  // updates: sessions opened (the most Open calls of any rank that did
  // not rejoin: 1 when nothing was reopened), ranks that rejoined (a new
  // process in the place of a dead one; the most any rank saw), the
  // updates that failed while the session stayed usable (generations,
  // ascending) and, for each, "update G: <error>" as the lowest rank
  // reported it. Such an update's target bytes are not checked (without
  // shadow targets they may hold anything); the updates after it are.
  uint64_t opens = 0;
  uint64_t rejoins = 0;
  std::vector<uint64_t> failed_updates;
  std::vector<std::string> failures;
  // The kind of run, as RunSelfTest was asked for it: the transport
  // ("local", a peer exchange's name, or "store" for a via_store run), the
  // procs, updates and delta options. They decide which fields the report
  // holds (VisitFields below).
  std::string transport;
  uint32_t procs = 0;
  uint32_t updates = 0;
  bool delta = false;
};

// The transfer's bandwidth in GB/s: bytes over seconds, 0 without time.
double SelfTestGbps(const SelfTestReport& r);

// Each update's fixed cost in seconds: its time minus its bytes at the
// session's measured bandwidth (the fastest update's exchange, r.seconds).
std::vector<double> SelfTestFixedSeconds(const SelfTestReport& r);

// Every field of `r` its kind of run holds, names sorted (reshard/fields.h):
// what `selftest --json` prints. Every run: bytes, gbps, memcpy_gbps,
// mismatch, operations, plan_seconds, seconds, segments, transport and
// verified. A store run adds load_seconds and upload_seconds; a live run
// (over a peer exchange: ucx, inproc) messages, packed_messages, procs,
// ranks_ready, verified_regions, verify_seconds and wire_bytes (with updates
// lists, one entry per update; else one number each); updates adds
// failed_updates, failures, fixed_seconds, open_seconds, opens, rejoins,
// update_seconds and updates; delta adds apply_seconds, delta_regions,
// encode_seconds, full_regions and snapshot_bytes.
template <typename Visit>
void VisitFields(const SelfTestReport& r, Visit&& visit) {
  const bool store = r.transport == "store";
  const bool live = !store && r.transport != "local";
  const bool updates = r.updates > 0;
  if (r.delta) visit("apply_seconds", r.apply_seconds);
  visit("bytes", r.bytes);
  if (r.delta) visit("delta_regions", r.delta_regions);
  if (r.delta) visit("encode_seconds", r.encode_seconds);
  if (updates) visit("failed_updates", r.failed_updates);
  if (updates) visit("failures", r.failures);
  if (updates) visit("fixed_seconds", SelfTestFixedSeconds(r));
  if (r.delta) visit("full_regions", r.full_regions);
  visit("gbps", SelfTestGbps(r));
  if (store) visit("load_seconds", r.load_seconds);
  visit("memcpy_gbps", r.memcpy_gbps);
  if (live) visit("messages", r.messages);
  visit("mismatch", r.mismatch);
  if (updates) visit("open_seconds", r.open_seconds);
  if (updates) visit("opens", r.opens);
  visit("operations", r.operations);
  if (live) visit("packed_messages", r.packed_messages);
  visit("plan_seconds", r.plan_seconds);
  if (live) visit("procs", r.procs);
  if (live) visit("ranks_ready", r.ranks_ready);
  if (updates) visit("rejoins", r.rejoins);
  visit("seconds", r.seconds);
  visit("segments", r.segments);
  if (r.delta) visit("snapshot_bytes", r.snapshot_bytes);
  visit("transport", r.transport);
  if (updates) visit("update_seconds", r.update_seconds);
  if (updates) visit("updates", r.updates);
  if (store) visit("upload_seconds", r.upload_seconds);
  visit("verified", r.verified);
  if (live && updates) {
    visit("verified_regions", r.verified_regions);
    visit("verify_seconds", r.verify_seconds);
    visit("wire_bytes", r.wire_bytes);
  }
  if (live && !updates) {
    auto first = [](const auto& list) {
      using T = typename std::decay_t<decltype(list)>::value_type;
      return list.empty() ? T{0} : list[0];
    };
    visit("verified_regions", first(r.verified_regions));
    visit("verify_seconds", first(r.verify_seconds));
    visit("wire_bytes", first(r.wire_bytes));
  }
}

// The byte the pattern puts at byte `byte` of element `element` (global
// row-major index) of the tensor with index `tensor` in sorted tensor order.
uint8_t SelfTestPatternByte(uint64_t tensor, uint64_t element, uint64_t byte);

// Writes the `itemsize` bytes of element `element` of tensor `tensor` to
// `out`: byte b is SelfTestPatternByte(tensor, element, b), the element's
// hash computed once.
void SelfTestPatternElement(uint64_t tensor, uint64_t element,
                            uint64_t itemsize, uint8_t* out);

// The generation whose pattern element `element` of tensor `tensor` holds
// at `generation` when each update from the second on changes about a
// `fraction` of the elements: the latest update k in [2, generation] that
// changed it (a hash of tensor, element and k below the fraction), else 1.
// A fraction of 1 (or more) is `generation` itself.
uint64_t SelfTestElementGeneration(uint64_t tensor, uint64_t element,
                                   uint64_t generation, double fraction);

// Runs the self-test. A mismatch is reported in the report (verified =
// false), not as an error; errors are invalid inputs or plans.
Result<SelfTestReport> RunSelfTest(const WeightPlacementManifest& source,
                                   const WeightPlacementManifest& target,
                                   const SelfTestOptions& options = {});

}  // namespace reshard

#endif  // RESHARD_SELFTEST_SELFTEST_H_
