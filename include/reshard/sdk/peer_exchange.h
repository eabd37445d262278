// Peer exchanges (backend SDK): how a live session's ranks reach each
// other. A live session (live.h) speaks only this interface; an
// implementation lives in a library of its own ("ucx" between processes
// and hosts, "inproc" for ranks that are threads of one process), registers
// itself by name (RegisterPeerExchange) and is chosen by name
// (LiveSessionOptions::exchange), so a new wire between processes touches
// neither the session nor its records, and can be written outside this
// tree against the installed headers.
//
// Contract for implementations (testing/peer_exchange_conformance.h checks
// it; an implementation joins that suite with one line):
//  - One exchange serves one rank of one session and is used from one
//    thread. Address() is what the others connect to (published in the
//    rank's address record, at most 64 KiB); peers are named by rank.
//    Connect() to the same peer again is a no-op.
//  - Disconnect(peer) forgets the connection to a peer that died, left or
//    is being replaced (a restarted rank, at a new address), leaving the
//    other peers' connections as they are. No operation with that peer may
//    be in flight (a session calls it between updates, or after a Run that
//    completed or failed leaving nothing in flight). An endpoint in error
//    is closed without waiting on the peer, and what the implementation
//    cannot release at once it keeps until exit. Afterwards PeerFailure()
//    no longer reports that peer, its imported remote keys are gone
//    (ImportRemoteKey again after reconnecting), and the next Connect() to
//    it makes a new connection. connections_made() counts the connections
//    made, so a session can show that it reconnected only to the peers it
//    replaced.
//  - Run() moves every operation of `ops` or fails with the first error,
//    naming the operation (DescribeExchangeOp) and the peer. Errors keep
//    their kind: Unavailable for a lost peer or the deadline, DataLoss for
//    a message whose size differs from what the receiver expects,
//    whatever `poll_abort` returned for an abort. On failure it may leave
//    operations in flight (ExchangeStats::abandoned_in_flight): their
//    buffers must be treated as in use, and the owner calls Abandon()
//    instead of destroying resources normally.
//  - A kSend and the matching kReceive list the same regions in the same
//    order; the message is their byte streams (each region's side, row by
//    row) concatenated, and is matched by (session_tag, first region).
//    Each rank runs all of its operations of one update in one Run, and
//    the ranks' Runs proceed concurrently (a thread or process each): a
//    send may wait for its receiver to run.
//  - kGet reads the peer's source side through a key the peer registered
//    (RegisterMemory) and this rank imported (ImportRemoteKey), for any
//    region (a strided one row by row); a session reads only the regions
//    for which PulledRegion() holds and pushes the others (every region,
//    when capabilities() says pull_every_region).
//  - Progress() must be called by a rank that waits while peers may still
//    read from it (pull) or complete messages to it.
//  - capabilities() is constant for the life of the exchange.
//
// Options: each implementation documents its own settings in its backend
// header (reshard/backends/ucx_options.h for "ucx") and refuses one it does
// not know, naming it; the session passes them through unread.

#ifndef RESHARD_SDK_PEER_EXCHANGE_H_
#define RESHARD_SDK_PEER_EXCHANGE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/bound_plan.h"
#include "reshard/status.h"

namespace reshard {

struct ExchangeOp {
  enum class Kind : uint8_t {
    kSend,     // send the source side to the peer (push)
    kReceive,  // receive into the target side
    kGet,      // read the peer's source side into the target side (pull)
  };
  const BoundRegion* region = nullptr;  // the first (or only) region
  // kSend/kReceive: further regions travelling in the same message; the
  // message is the concatenation of every region's stream in this order,
  // and both ends must list the same regions in the same order.
  std::vector<const BoundRegion*> more;
  uint32_t peer = 0;  // the other side's rank (connected with Connect)
  Kind kind = Kind::kSend;
  // kGet: the handle ImportRemoteKey returned for the peer's range holding
  // the source side.
  uint64_t remote_key = 0;
  // When set (kSend/kReceive), the message is these bytes instead of the
  // regions' streams (a delta update's encoded regions): a send sends
  // [buffer, buffer + buffer_bytes); a receive accepts a message of at most
  // buffer_bytes into the buffer and stores its length in *received. The
  // regions still name the message (its tag) and the operation in errors.
  uint8_t* buffer = nullptr;
  uint64_t buffer_bytes = 0;
  uint64_t* received = nullptr;

  // Bytes of every region of the operation (with a buffer: buffer_bytes).
  uint64_t bytes() const;
};

// How a live session forms operations (an implementation need not know):
// regions of at most kMaxCoalescedRegion bytes between the same two ranks
// share messages of at most kMaxCoalescedBytes (push; in pull mode they
// are pushed too), so a layout with tens of thousands of small tensors
// costs a few messages per pair of ranks.
constexpr uint64_t kMaxCoalescedRegion = uint64_t{64} << 10;
constexpr uint64_t kMaxCoalescedBytes = uint64_t{4} << 20;

// Regions read with kGet: both sides contiguous (one get), or rows of at
// least kMinPulledRow bytes (one get per row). The others are pushed as
// messages, so small rows never become one get each.
constexpr uint64_t kMinPulledRow = uint64_t{256} << 10;
bool PulledRegion(const BoundRegion& region);

// The options of one Run.
struct ExchangeRunOptions {
  // High 32 bits of every message tag (the region index fills the low 32),
  // so that messages of another session or update never match.
  uint32_t session_tag = 0;
  uint32_t max_in_flight = 64;
  std::chrono::steady_clock::time_point deadline;
  // Polled about every `abort_poll_interval`; a non-OK status stops the
  // exchange with that status (a peer's abort, for example).
  std::function<Status()> poll_abort;
  std::chrono::milliseconds abort_poll_interval{20};
  // Called once, after the first operation completed successfully.
  std::function<void()> on_first_completion;
  // Called with the index (into Run's `ops`) of every operation that
  // completed successfully (a receive: with the expected size), once, on
  // the thread that runs Run, as soon as the exchange sees it complete: a
  // receive's or get's target bytes are final from then on (a session
  // hashes them while the rest moves).
  std::function<void(size_t op)> on_completion;
  // Called, on the thread that runs Run, with every piece of an operation's
  // stream (SideStream order: its regions' sides one after another, each
  // row by row) that passes through this rank's memory on its way: a
  // send's piece right after the exchange packed it, a receive's right
  // after it was unpacked into the targets. `bytes` are the stream's
  // `length` bytes from `offset`, valid during the call only. A session
  // hashes them there, while they are in cache, instead of reading the
  // regions from memory again. Pieces come in no promised order and an
  // implementation may hand none at all (zero-copy moves, or an exchange
  // that does not pack): a caller keeps on_completion for whatever its
  // pieces did not cover.
  std::function<void(size_t op, uint64_t offset, const uint8_t* bytes,
                     uint64_t length)>
      on_piece;
};

struct ExchangeStats {
  uint64_t messages_sent = 0;
  uint64_t messages_received = 0;
  uint64_t bytes_sent = 0;
  uint64_t bytes_received = 0;
  uint64_t packed_messages = 0;    // sides that went through pack/unpack
  uint64_t coalesced_regions = 0;  // regions in messages of several regions
  // When the exchange failed: operations posted and not completed, left to
  // the implementation. Non-zero means their buffers may still be read or
  // written.
  uint64_t abandoned_in_flight = 0;
  uint64_t gets = 0;  // remote get requests (pull mode)
};

// "sending region 7 to rank 1 (host a)" and the like, for errors.
std::string DescribeExchangeOp(const ExchangeOp& op,
                               const std::string& peer_name);

// What an exchange is good at, for the session's choices.
struct PeerExchangeCapabilities {
  // Under LiveProtocol::kAuto, when every rank of the session runs on one
  // host: read with kGet (pull) rather than push messages. An exchange
  // that moves messages through memory shared between processes reads
  // faster than it sends; one over a network sends faster.
  bool pull_on_one_host = false;
  // When the session pulls: read every region with kGet, small and
  // strided ones included (else only those PulledRegion() holds for), so
  // that such an exchange is never sent a message. For an exchange whose
  // gets are copies in the reader's own device ("cuda-ipc": a strided
  // region is one device copy or kernel, not one get per row), and which
  // may then refuse kSend and kReceive (a pushing session: protocol push,
  // delta updates, movable sources).
  bool pull_every_region = false;
  // The memory kinds the exchange reads and writes (RuntimeBindingFragment
  // devices "cpu", "cuda", "cuda:<ordinal>"). A session binding fragments
  // of any other kind is refused at open and at every update, on every
  // rank alike, naming the first such fragment, before the exchange sees
  // a pointer.
  std::vector<MemoryKind> memory_kinds = {MemoryKind::kHost};
};

// Optional, tensor-level: an exchange that moves whole tensors itself, as
// one collective over every rank of the session (the "nccl" exchange:
// NCCL M2N's ncclReshard), instead of as the session's regions. What a
// session hands it once, after plan and bind (every pointer valid for the
// call only).
struct TensorMoveSetup {
  const LogicalTransferPlan* plan = nullptr;
  const WeightPlacementManifest* source = nullptr;
  const WeightPlacementManifest* target = nullptr;
  // Every participant's session rank, as published.
  const std::map<std::string, uint32_t, std::less<>>* source_rank = nullptr;
  const std::map<std::string, uint32_t, std::less<>>* target_rank = nullptr;
  // Every participant's bindings, as published.
  const std::vector<WeightRuntimeBindingManifest>* source_bindings = nullptr;
  const std::vector<WeightRuntimeBindingManifest>* target_bindings = nullptr;
  // Every rank's published address (Address()), by rank.
  const std::vector<std::string>* addresses = nullptr;
  uint32_t rank = 0;   // this rank
  uint32_t ranks = 0;  // the session's ranks
};

class TensorMover {
 public:
  virtual ~TensorMover() = default;

  // Once per session, before WireUp (which then also readies what the
  // mover needs): one entry per tensor of setup.plan->tensors(), "" for a
  // tensor this mover moves, else why not in one line naming a rule.
  // Every rank must get the same answers, so they depend on the setup's
  // published data only: the session leaves the regions of the tensors
  // adopted here out of Run() on every rank. An error fails the session.
  virtual Result<std::vector<std::string>> Adopt(
      const TensorMoveSetup& setup) = 0;

  // Moves every adopted tensor whole (every rank that holds or wants it
  // takes part): a collective, called once per update by every rank when
  // any tensor was adopted, with this rank's current bindings (its
  // buffers are found there; each must still be what Adopt accepted, else
  // FailedPrecondition naming the rule). Keeps `options`' deadline
  // (Unavailable) and poll_abort (its status); other fields are unused.
  // Fails leaving nothing in flight.
  virtual Status Run(const std::vector<WeightRuntimeBindingManifest>& sources,
                     const std::vector<WeightRuntimeBindingManifest>& targets,
                     const ExchangeRunOptions& options) = 0;
};

class PeerExchange {
 public:
  virtual ~PeerExchange() = default;

  // The exchange's tensor mover, or null (the default): every tensor
  // moves as regions through Run().
  virtual TensorMover* tensor_mover() { return nullptr; }

  virtual PeerExchangeCapabilities capabilities() const = 0;

  // This rank's address, published for the peers.
  virtual Result<std::string> Address() = 0;

  // Registers [address, address + length) for the peers to read (pull)
  // and returns the packed key to publish with it.
  virtual Result<std::string> RegisterMemory(void* address,
                                             uint64_t length) = 0;

  // Connects to rank `peer` at the address it published (once per peer;
  // again is a no-op). `name` names the peer in errors.
  virtual Status Connect(uint32_t peer, const std::string& address,
                         std::string name) = 0;

  // Forgets the connection to rank `peer` (see the contract above): no
  // operation with it may be in flight; an endpoint in error is closed
  // without waiting on the peer, what cannot be released at once is kept
  // until exit; PeerFailure() then no longer reports it, keys imported for
  // it are dropped, and the next Connect(peer, ...) makes a new connection.
  // A peer never connected is OK (nothing to do).
  virtual Status Disconnect(uint32_t peer) = 0;

  // The connections this exchange has made: each Connect() that made a
  // new one counts 1 (a Connect() after Disconnect() counts again; one to
  // a peer already connected does not).
  virtual uint64_t connections_made() const = 0;

  // Completes the connections made so far, so that transfers start on
  // wired-up connections and a peer that dies later is seen as lost, not
  // as a failed connect.
  virtual Status WireUp(std::chrono::steady_clock::time_point deadline,
                        const std::function<Status()>& poll_abort) = 0;

  // A handle for `packed`, a key rank `peer` published, for
  // ExchangeOp::remote_key (the peer must be connected).
  virtual Result<uint64_t> ImportRemoteKey(uint32_t peer,
                                           const std::string& packed) = 0;

  // OK while every connected peer is healthy; else the first failure seen.
  virtual Status PeerFailure() const = 0;

  // Progresses pending work (a peer may be reading from us); when nothing
  // moved, waits at most `idle_wait`.
  virtual void Progress(std::chrono::microseconds idle_wait) = 0;

  // Runs `ops` to completion (see the contract above).
  virtual Status Run(const std::vector<ExchangeOp>& ops,
                     const ExchangeRunOptions& options,
                     ExchangeStats* stats) = 0;

  // Gives every resource up without progressing or tearing it down: after
  // a failed session, buffers of operations left in flight may still be
  // in use. The destructor then releases nothing.
  virtual void Abandon() = 0;
};

// One exchange's settings by name, in order (a later one overrides an
// earlier one of the same name). Which names an exchange takes is stated
// by its backend header; empty keeps its defaults.
struct PeerExchangeOptions {
  std::vector<std::pair<std::string, std::string>> settings;

  PeerExchangeOptions& Set(std::string name, std::string value) {
    settings.emplace_back(std::move(name), std::move(value));
    return *this;
  }
  bool empty() const { return settings.empty(); }
};

// What an implementation is made with.
struct PeerExchangeConfig {
  uint32_t rank = 0;
  PeerExchangeOptions options;
};

// A setting an implementation offers on command lines, as the flag
// --<exchange>-<setting> ('_' spelled '-'): "ucx"'s tls is --ucx-tls.
struct PeerExchangeFlag {
  std::string setting;  // the setting's name, as check_options takes it
  std::string help;     // one line for --help
  // The values it takes, when they are a fixed set (else any).
  std::vector<std::string> choices;
};

// One registered implementation.
struct PeerExchangeBackend {
  std::string name;  // what LiveSessionOptions::exchange names: "ucx"
  // One line for listings (the CLI's --help): what it is for.
  std::string description;
  // A new exchange for one rank; refuses unknown or malformed settings
  // with InvalidArgument naming them.
  std::function<Result<std::unique_ptr<PeerExchange>>(
      const PeerExchangeConfig& config)>
      make;
  // Checks settings without making anything (a session checks them
  // before it publishes); empty: every setting is refused.
  std::function<Status(const PeerExchangeOptions& options)> check_options;
  // Settings offered as command-line flags (the CLI's selftest), in order.
  std::vector<PeerExchangeFlag> flags;
};

// Registers `backend`; an implementation's folder registers itself with
// `static const bool kRegistered = RegisterPeerExchange(...).ok()`. A name
// registered before keeps its first implementation: AlreadyExists `peer
// exchange "<name>" is already registered`.
Status RegisterPeerExchange(PeerExchangeBackend backend);

// The implementation `name`, or InvalidArgument `unknown peer exchange
// "<name>" (registered: <names>)`.
Result<const PeerExchangeBackend*> FindPeerExchange(std::string_view name);

// A new exchange of implementation `name` (FindPeerExchange's errors, then
// the implementation's).
Result<std::unique_ptr<PeerExchange>> MakePeerExchange(
    std::string_view name, const PeerExchangeConfig& config);

// The registered names, sorted.
std::vector<std::string> RegisteredPeerExchanges();

}  // namespace reshard

#endif  // RESHARD_SDK_PEER_EXCHANGE_H_
