// Live reshard between processes and hosts over a peer exchange
// (sdk/peer_exchange.h; "ucx" by default).
//
// Every process of a session (a "rank") hosts some source and/or target
// participants. It publishes its runtime bindings and exchange address in
// a rendezvous RecordStore under the session key, derives the same plan
// as every other rank from the two placements, binds it with everybody's
// bindings, rechecks its own generations and leases, and then moves only
// its own share: it sends the regions whose source it hosts and receives
// the regions whose target it hosts (regions with both ends here are
// copied locally).
//
// Lifecycle (each step fails closed):
//  1. publish: this rank's source snapshot is read-only from here on, until
//     RunLiveReshard returns;
//  2. plan + bind + fence (generation and lease recheck at execution);
//  3. connect: one endpoint per peer this rank exchanges with, wired up
//     before any transfer;
//  4. exchange: one message (push) or get (pull; per row for strided
//     regions) per region, bounded window of operations this rank starts;
//  5. completion: targets check every receive (and the caller's validator),
//     then record "done";
//  6. world barrier: every rank waits for every rank's "done";
//  7. ready: target ranks record activation-ready; sources may release
//     their snapshot once RunLiveReshard returns.
// A failure anywhere records an abort with its reason; every other rank
// stops with an error naming the failed rank within `timeout`, no target
// is marked ready, and sources release their snapshot.
//
// Rendezvous keys (under <session>/): rank/<r> (publication),
// bindings/<r>/<side>-<i>, address/<r>, rkeys/<r> (pull), done/<r>,
// ready/<r>, abort/<r>. Each is a canonical JSON record that other ranks
// parse strictly (exact fields, the rank in the record equal to the rank in
// the key; exchange addresses and keys with their SHA-256, checked before
// the exchange sees them); docs/live.md lists them. A session key names
// one run: a rank refuses to join a session in which it already has
// records.

#ifndef RESHARD_LIVE_H_
#define RESHARD_LIVE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/binding.h"
#include "reshard/conversion.h"
#include "reshard/placement.h"
#include "reshard/sdk/peer_exchange.h"
#include "reshard/sdk/record_store.h"
#include "reshard/status.h"

namespace reshard {

namespace cuda {
class DeviceApi;  // the CUDA executor's device-API seam (internal)
}  // namespace cuda

// The bindings of the participants one rank hosts.
struct LiveBindings {
  std::vector<WeightRuntimeBindingManifest> sources;
  std::vector<WeightRuntimeBindingManifest> targets;
  // Optional proofs that bindings of `sources` / `targets` were checked
  // already (BindCheckedBuffers, CheckedBindings::Merge), for the source /
  // target placement: a binding equal to one its proof holds is not
  // checked again when the session binds its plan; every other binding,
  // the other ranks' included, is checked once there. A proof for another
  // placement fails the open naming both. Of() fills both from checked
  // sets.
  std::optional<CheckedBindings> checked_sources;
  std::optional<CheckedBindings> checked_targets;

  static LiveBindings Of(CheckedBindings sources, CheckedBindings targets);
};

// Who moves the bytes. kPush: sources send tagged messages, targets
// receive (two-sided; "ucx" uses CMA zero-copy on one host). kPull: sources
// register their fragments and publish remote keys, targets read with RMA
// get (regions with contiguous sides or rows of at least 256 KiB; the rest
// are still pushed). kAuto: pull when every rank is on one host and the
// exchange reads faster than it sends there
// (PeerExchangeCapabilities::pull_on_one_host; "ucx" does when UCX chooses
// its transports: shared memory, pull measured 9.1 GB/s, push 7.3), else
// push (RMA over TCP is far slower than tagged messages). Measured in
// docs/live.md.
enum class LiveProtocol : uint8_t { kAuto, kPush, kPull };

// How a session moves CUDA fragments over an exchange that moves host
// memory only ("ucx", "inproc"; LiveSessionOptions::device_staging).
// kPipeline: when the session sends no deltas and its protocol is push or
// auto (auto then pushes wherever a published binding holds a CUDA
// fragment, even with every rank on one host), the fragments stay in
// device memory and every message naming a
// CUDA region side travels in chunks of 4 MiB through at most
// device_staging_bytes of pinned host memory per rank, whatever the
// model's size (docs/gpu.md); otherwise as kMirror. kMirror: each CUDA
// fragment is mirrored whole in pinned host memory (at most
// device_staging_bytes in all).
enum class DeviceStaging : uint8_t { kPipeline, kMirror };

// The weights a target rank serves after a successful update (a standing
// session's version): the update's generation, the source placement it
// came from, the caller's tag (LiveSession::Update; for example the
// trainer step) and the digest of the update (XXH3-64 over the ranks'
// digests of the regions' hashes they verified, in rank order: every rank
// of the session holds the same; 0 when the session does not verify).
// A failed update changes nothing.
struct LiveVersion {
  uint64_t generation = 0;
  std::string source_placement_id;
  std::string tag;
  uint64_t digest = 0;

  friend bool operator==(const LiveVersion&, const LiveVersion&) = default;
};

// The longest version tag (UTF-8, no control characters).
inline constexpr size_t kMaxVersionTagBytes = 256;

struct LiveSessionOptions {
  // Session key: one record-key component ([A-Za-z0-9._~%-]).
  std::string session;
  uint32_t rank = 0;
  uint32_t ranks = 1;
  // Longest wait on any peer (publication, transfer, barrier).
  std::chrono::milliseconds timeout{60000};
  // Send (or get) operations in flight per rank.
  uint32_t max_in_flight = 64;
  LiveProtocol protocol = LiveProtocol::kAuto;
  // The peer exchange that moves the bytes between ranks, by registered
  // name (RegisteredPeerExchanges()): "ucx" (between processes and hosts)
  // or "inproc" (every rank a thread of one process: tests of the
  // session's protocol without a network). Every rank of a session names
  // the same.
  std::string exchange = "ucx";
  // The exchange's own settings, by name, as its backend header states
  // them (reshard/backends/ucx_options.h for "ucx":
  // ToPeerExchangeOptions(UcxOptions)); checked at open, before anything
  // is published. Empty: the exchange's defaults.
  PeerExchangeOptions exchange_options;
  // The bindings current right before execution (the fence); when empty,
  // the published ones are taken as current.
  std::function<Result<LiveBindings>()> current_bindings;
  // Standing sessions: receive into shadow buffers (host memory the
  // session allocates, one per target fragment this rank hosts, so as
  // many bytes again as its targets) and copy them into the targets only
  // after the world barrier of a successful update. A failed update
  // leaves the targets (the serving weights) untouched; the price is the
  // memory and one local copy of this rank's target bytes per update.
  bool shadow_targets = false;
  // CUDA fragments over an exchange that moves host memory only ("ucx",
  // "inproc"; PeerExchangeCapabilities::memory_kinds): where a CUDA
  // executor is available, each CUDA fragment of this rank is mirrored in
  // a pinned host buffer the session allocates (at most this many bytes
  // in all; a layout whose CUDA fragments take more is refused at open or
  // at the update that binds them, naming the first fragment past the
  // bound). Before each update the CUDA sources are copied device to host
  // into their mirrors; the exchange and the verification run on the
  // mirrors; once the update succeeded on every rank (after the world
  // barrier and any shadow flip) the target mirrors are copied host to
  // device. A failed update leaves CUDA targets untouched. Without a CUDA
  // executor CUDA fragments are refused as before (docs/gpu.md).
  // Over an exchange that moves CUDA memory ("cuda-ipc"; "nccl" over the
  // library) CUDA fragments are not mirrored: the exchange moves them,
  // same-rank copies run on the device, and verification reads each
  // device region's bytes through one pinned staging buffer of at most
  // this many bytes (delta updates are refused there; shadow targets of
  // CUDA targets are device memory).
  uint64_t device_staging_bytes = uint64_t{256} << 20;
  // CUDA fragments over an exchange that moves host memory only: staged
  // through a bounded pipeline of pinned chunks (the default, where the
  // session pushes without deltas) or mirrored whole (DeviceStaging).
  // Every rank of a session names the same. Under the pipeline,
  // device_staging_bytes bounds the chunks (at least one chunk of 4 MiB,
  // else the session is refused at open naming device_staging_bytes), and
  // the session treats the CUDA fragments as over an exchange that moves
  // CUDA memory (above).
  DeviceStaging device_staging = DeviceStaging::kPipeline;
  // Internal: the device API the mirrors, the staging and the same-rank
  // device copies go through; empty: the CUDA runtime's. Tests set the
  // host emulation (src/exec_cuda/).
  std::shared_ptr<cuda::DeviceApi> device_api;
  // Called after every receive of this rank completed, before "done";
  // an error aborts the session (no target becomes ready).
  std::function<Status()> validate_targets;
  // Liveness: every rank publishes a heartbeat record every
  // `heartbeat_interval` from a thread of its own (also between a standing
  // session's updates), and a rank whose heartbeat stands still for
  // `peer_timeout` (on the watcher's clock) is named by the ranks waiting
  // for it: "rank R stopped answering (no heartbeat for N ms; it died or
  // hangs)". With the defaults a killed rank is named within about 2 s.
  // A zero interval turns heartbeats off (a dead rank is then found by
  // its endpoints or at `timeout`). peer_timeout must be at least twice
  // the interval.
  std::chrono::milliseconds heartbeat_interval{200};
  std::chrono::milliseconds peer_timeout{1500};
  // Standing sessions: whether a source participant may pass bindings at
  // new addresses to Update. The rule is the same on one host and across
  // hosts: false (the default) refuses a moved source before any byte
  // moves, whatever protocol the session chose; true rebinds it, and so
  // makes kAuto push everywhere (a pull session's registered sources
  // cannot move) and refuses kPull at open.
  bool movable_sources = false;
  // Observer of this rank's progress, for tools and fault tests: called
  // with "published", "transfer" (after the first operation this rank
  // initiated or received completed), "completing" (its own operations
  // are over; before validation and "done") and "done".
  std::function<void(std::string_view stage)> on_stage;
  // Conversions (docs/conversion.md): tensors whose dtype differs between
  // the placements convert, bit for bit as in a local reshard; without it
  // the first such tensor is refused. Tensors the target holds in block
  // FP8 quantize at the source, before the wire, wherever every source
  // fragment holds whole `fp8_block`s (FP8 bytes and float32 scales
  // travel: about half the bytes of a BF16 update); casts, dequantization
  // and quantization of split blocks run at the target once the bytes
  // arrived, before validate_targets (after the flip in shadow mode).
  // Every rank of a session sets the same. The converted fragments must
  // be contiguous host memory; the session holds host buffers for them
  // (LiveSession::conversion_bytes).
  bool convert = false;
  Fp8Block fp8_block;
  // Standing sessions: delta updates (docs/live.md, "Delta updates").
  // The first update after open moves every byte; from then on each
  // source sends, per region, only the elements that changed since the
  // last update (compared as raw bytes of their itemsize: any dtype, bit
  // exact), encoded as runs, as a bitmap or whole, whichever is smallest,
  // and targets apply them in place. Every rank keeps a snapshot of what
  // it sends (host memory, LiveSession::delta_snapshot_bytes()). A target
  // region whose bytes are no longer what the source last delivered (its
  // buffer was overwritten or re-allocated) is sent in full in the same
  // update. Push only: kAuto pushes, kPull is refused. Every rank of a
  // session sets the same.
  bool delta = false;
  // delta: threads a rank encodes its messages on. 0: half the machine's
  // cores, between 2 and 8, and one for less than 64 MiB at a time.
  uint32_t delta_threads = 0;
  // Parameter-map fingerprints (docs/engines.md): what this rank declares
  // of the memory of the target participants it hosts (for engine
  // parameters, DeclaredParameterMapsToJson of their maps; empty: nothing;
  // at most kMaxTargetDeclarationBytes), published at open as the record
  // <session>/declared/<rank>. When `check_target_declaration` is set, it
  // is called at open with every other rank's declaration (empty when that
  // rank declared nothing) once all ranks have published, before anything
  // is planned against them, connected or moved; an error fails the open
  // on this rank and, recorded as its abort, on every rank.
  std::string target_declaration;
  std::function<Status(uint32_t rank, std::string_view declaration)>
      check_target_declaration;
  // Verified on arrival (docs/live.md, "When things fail"): every region a
  // rank receives is checked against the XXH3-64 its source computed over
  // the bytes it sent (the converted bytes when the source quantizes; in a
  // delta update, the region as it is after the change), before the
  // rank's vote. The hashes travel in one message per pair of ranks after
  // the data. A difference fails the update on every rank, naming the
  // region, its tensor, the target participant and the peer; shadow
  // targets then keep serving the last good generation. Every rank of a
  // session sets the same.
  bool verify = true;
  // Standing sessions: a rank found dead (silent heartbeat, lost endpoint,
  // or a rank that had to leave after an uncertain update) is waited for
  // this long, from the moment it was found, to rejoin (a new process
  // opening with `rejoin`) before the update fails. Zero fails at once.
  std::chrono::milliseconds rejoin_timeout{30000};
  // Standing sessions: this process takes the place of rank `rank` of the
  // open session `session`, whose process died or left (same rank and
  // participants; its bindings and address may be new, on another host).
  // The surviving ranks reconnect to it alone; its first update is a full
  // one (delta updates resume after it). Without it, a rank with records
  // in the session is refused (AlreadyExists).
  bool rejoin = false;
  // Standing sessions, ranks hosting targets: called after every
  // successful update, once the targets hold the new weights (after the
  // shadow flip and conversions), with the version they now serve.
  std::function<void(const LiveVersion&)> on_version;
  // Fault injection (tests; `selftest --inject-fault corrupt-message`): in
  // the update at this generation (1 for a one-shot run; 0: never), this
  // rank flips one byte of the first region it received from another rank
  // once it arrived, as a byte flipped on the wire would be.
  uint64_t corrupt_received_in_update = 0;
};

// The largest target declaration a rank may publish.
inline constexpr size_t kMaxTargetDeclarationBytes = 64u << 20;

// Delta updates: one peer's traffic in an update, as this rank saw it.
struct LivePeerTraffic {
  uint32_t peer = 0;
  uint64_t wire_bytes_received = 0;  // delta messages from it
  uint64_t delta_regions = 0;        // regions received as changes
  uint64_t full_regions = 0;         // regions received whole
  uint64_t delta_regions_sent = 0;   // to it
  uint64_t full_regions_sent = 0;
};

struct LiveUpdateReport {
  uint64_t generation = 0;
  uint64_t operations = 0;        // regions this rank executed as target
  uint64_t local_operations = 0;  // of those, copied within this rank
  uint64_t messages_sent = 0;
  uint64_t gets = 0;
  // Tensors the exchange moved whole, collectively over every rank (the
  // "nccl" exchange's NCCL M2N); the same on every rank. Their regions
  // count in bytes_received and verified_regions, not in operations,
  // messages or wire_bytes.
  uint64_t m2n_tensors = 0;
  uint64_t packed_messages = 0;
  uint64_t coalesced_regions = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;  // incl. local copies into targets
  uint64_t wire_bytes = 0;      // of those, received from other ranks
  bool rebound = false;         // bindings changed and were rebound
  double transfer_seconds = 0;  // exchange and local copies
  double barrier_seconds = 0;
  double validate_seconds = 0;  // in options.validate_targets (the caller's)
  // Waiting for the other ranks to arrive (their fence passed): skew
  // between the ranks' callers, not the session's cost.
  double arrival_seconds = 0;
  double update_seconds = 0;  // the whole Update call
  // convert: quantizing this rank's sources and converting its targets.
  double convert_seconds = 0;
  // delta (LiveSessionOptions::delta): regions this rank received as
  // changes and whole (a full update counts none), encoding and applying
  // time, and each peer's traffic (not in the Python dict).
  uint64_t delta_regions = 0;
  uint64_t full_regions = 0;
  double encode_seconds = 0;
  double apply_seconds = 0;
  std::vector<LivePeerTraffic> peers;
  bool ready = false;  // this rank's targets are activation-ready
  // verify: regions this rank received (from peers and from itself) and
  // checked against their source's hash; hashing what it received and
  // the hash round (its source hashes run while the data moves).
  uint64_t verified_regions = 0;
  double verify_seconds = 0;
};

// Calls visit(name, value) for every field of `r`, names sorted: the one
// statement of the report's fields (Python's update() dict is written
// from it).
template <typename Visit>
void VisitFields(const LiveUpdateReport& r, Visit&& visit) {
  visit("apply_seconds", r.apply_seconds);
  visit("arrival_seconds", r.arrival_seconds);
  visit("barrier_seconds", r.barrier_seconds);
  visit("bytes_received", r.bytes_received);
  visit("bytes_sent", r.bytes_sent);
  visit("coalesced_regions", r.coalesced_regions);
  visit("convert_seconds", r.convert_seconds);
  visit("delta_regions", r.delta_regions);
  visit("encode_seconds", r.encode_seconds);
  visit("full_regions", r.full_regions);
  visit("generation", r.generation);
  visit("gets", r.gets);
  visit("local_operations", r.local_operations);
  visit("m2n_tensors", r.m2n_tensors);
  visit("messages_sent", r.messages_sent);
  visit("operations", r.operations);
  visit("packed_messages", r.packed_messages);
  visit("ready", r.ready);
  visit("rebound", r.rebound);
  visit("transfer_seconds", r.transfer_seconds);
  visit("update_seconds", r.update_seconds);
  visit("validate_seconds", r.validate_seconds);
  visit("verified_regions", r.verified_regions);
  visit("verify_seconds", r.verify_seconds);
  visit("wire_bytes", r.wire_bytes);
}

// A one-shot session's report (RunLiveReshard): an update's report (its
// generation 0, not rebound; update_seconds 0) plus the plan's fields.
struct LiveReport : LiveUpdateReport {
  uint64_t regions = 0;     // regions of the whole plan
  double plan_seconds = 0;  // plan + bind + fence + connect
};

// Every field of `r`, names sorted (reshard/fields.h): the update's fields
// and plan_seconds and regions.
template <typename Visit>
void VisitFields(const LiveReport& r, Visit&& visit) {
  VisitFields(static_cast<const LiveUpdateReport&>(r), visit);
  visit("plan_seconds", r.plan_seconds);
  visit("regions", r.regions);
}

// Opens the rendezvous named by `uri`: a directory (a plain path or
// fs://PATH, see OpenDirectoryRecordStore; records are published
// atomically, not fsynced), or a Redis server (redis://HOST:PORT[/DB][?...]
// or unix:///PATH, see reshard/backends/redis_store.h; no durability is
// required of the server), so that ranks on hosts sharing no filesystem can
// meet. Any other scheme is refused rather than taken for a relative directory.
Result<std::unique_ptr<RecordStore>> OpenRendezvous(std::string_view uri);

// Runs this rank's part of a live reshard session; see the file comment.
// Refuses (AlreadyExists, before publishing anything) a session in which
// this rank already has records. Every record of another rank is parsed
// strictly; a malformed one fails the session with an error naming it.
Result<LiveReport> RunLiveReshard(RecordStore& rendezvous,
                                  const WeightPlacementManifest& source,
                                  const WeightPlacementManifest& target,
                                  const LiveBindings& bindings,
                                  const LiveSessionOptions& options);

// ---------------------------------------------------------------------------
// Standing sessions: connect once, update every step.
//
// Open publishes this rank's bindings and worker address, plans, binds and
// connects once (and registers the sources in pull mode); each Update then
// only rechecks the fence, moves the bytes, validates completion and
// passes the world barrier, under records scoped to its generation
// (<session>/u/<generation>/done/<r>, .../ready/<r>) that are removed once
// every rank is past the next barrier. Close passes a "closed" barrier and
// removes this rank's records. Every rank of the session opens it with the
// same key, placements and rank count, and calls Update with the same
// generations in the same order.
//
// Memory contract (allocation guard): while Update runs, the exchange may
// read the sources and write the targets this rank hosts; between updates,
// and after Close, the session touches neither. After an Update that failed
// with outcome() == kUncertain it may still do so: those buffers must not
// be freed or reused while the process lives.
//
// Failures (docs/live.md, "When things fail"). An update fails alike on
// every rank (its recorded outcome). When it failed before any byte moved
// (a refused fence or binding, a tag that differs between ranks, a rank
// that did not come back in time) or after every byte arrived (a region
// that failed verification, the caller's validator), nothing is in flight
// anywhere: the session stays open, shadow targets still serve the last
// good generation, and the next Update (a new generation, or the same one
// again) runs over the same connections. A failure in the middle of the
// exchange (a peer that died, a lost connection) ends the session on the
// ranks with operations in flight (outcome() kUncertain: they must leave
// and rejoin, a new process with LiveSessionOptions::rejoin) and on the
// rank that aborted it; the others stay, and their next update waits up to
// rejoin_timeout for the missing ranks to rejoin.

enum class LiveOutcome : uint8_t {
  kOk,         // the last update succeeded (or none ran yet)
  kFailed,     // the last update failed with nothing of this rank in flight
  kUncertain,  // an update failed with operations of this rank in flight
};

class LiveSession {
 public:
  // Opens this rank's seat (see above). `bindings` are this rank's
  // bindings as of now; options.session names the session (a rank refuses
  // a key under which it already has records); options.current_bindings,
  // when set, is the fence of every update. Fails closed like
  // RunLiveReshard: a failure is recorded for the other ranks.
  static Result<std::unique_ptr<LiveSession>> Open(
      RecordStore& rendezvous, WeightPlacementManifest source,
      WeightPlacementManifest target, LiveBindings bindings,
      LiveSessionOptions options);

  // Closes (errors ignored) unless Close was called or the session is no
  // longer usable().
  ~LiveSession();
  LiveSession(const LiveSession&) = delete;
  LiveSession& operator=(const LiveSession&) = delete;

  // One update at `generation`, strictly above the last successful
  // update's (a failed one may be retried at its generation). When
  // `bindings` is given it is this rank's bindings now: fragments that
  // moved are rebound locally before anything moves (push), or refused
  // (FailedPrecondition) for sources registered at open (pull). `tag`
  // (kMaxVersionTagBytes of UTF-8, no control characters) goes into the
  // version the update publishes; ranks that pass one must pass the same
  // (usually the sources pass the trainer step and the targets none). On
  // error the other ranks fail too, naming this rank; usable() tells
  // whether the session can be updated again.
  Result<LiveUpdateReport> Update(uint64_t generation,
                                  const LiveBindings* bindings = nullptr,
                                  std::string_view tag = {});

  // Gives up the session without an update (for example this rank's own
  // inputs for the next update were refused): records `reason` for the
  // other ranks, which then fail their next update naming this rank once
  // rejoin_timeout passed without a process rejoining in its place; this
  // session object cannot be updated again. Nothing of this rank is in
  // flight between updates, so outcome() becomes kFailed.
  Status Abort(const Status& reason);

  // "closed" barrier with every rank (up to the timeout), then removes
  // this rank's records. Idempotent; after a failed update it only
  // releases what it can. The closed record carries this rank's count of
  // updates: a rank that calls Update again instead of closing fails at
  // once with "live session S: rank R closed the session after N
  // updates", and this Close then reports that rank's failure (aborted
  // by it) and leaves this rank's records (RemoveLiveSession reclaims
  // them).
  Status Close();

  LiveOutcome outcome() const;
  // Whether Update may be called: not closed, not aborted, and no update
  // left operations of this rank in flight.
  bool usable() const;
  // The weights this rank's targets hold since the last successful update
  // (nullopt before the first).
  std::optional<LiveVersion> version() const;
  // Connections this rank's exchange made (one per peer at open, one more
  // per reconnection to a rank that rejoined).
  uint64_t connections() const;
  // Ranks that rejoined this session since this rank opened it.
  uint64_t rejoins() const;
  // Plan + bind + connect, and the whole Open call, in seconds.
  double plan_seconds() const;
  double open_seconds() const;
  uint64_t regions() const;  // regions of the whole plan
  // convert: host bytes this rank holds for converted fragments.
  uint64_t conversion_bytes() const;
  // delta: host bytes of this rank's snapshot of what it sends (known at
  // open, allocated by the first update).
  uint64_t delta_snapshot_bytes() const;

 private:
  struct Impl;
  explicit LiveSession(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Removes every record of `session` from the rendezvous: the leftovers of
// a session whose ranks crashed (a standing session's ranks remove their
// own records when they close). Call only when none of its ranks runs.
// Returns the number of records removed.
Result<uint64_t> RemoveLiveSession(RecordStore& rendezvous,
                                   std::string_view session);

// Records that `rank` gives up on `session` without running (or before
// finishing) RunLiveReshard, for example because its own inputs were
// invalid: every other rank of the session then stops with "live session
// S aborted by rank R: <reason>" instead of waiting for it until the
// timeout, and no target becomes ready. Put-once: if the rank already
// recorded an abort, its first reason stands and this returns OK.
Status AbortLiveSession(RecordStore& rendezvous, std::string_view session,
                        uint32_t rank, const Status& reason);

}  // namespace reshard

#endif  // RESHARD_LIVE_H_
