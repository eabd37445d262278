// The in-process peer exchange (registered as "inproc"): every rank of a
// session is a thread of one process, so a message is packed into a
// mailbox of the receiving rank and a get reads the source directly. It
// runs the live session's protocol (records, fences, barriers, shadows,
// rebinding, conversion) without UCX, for tests; it is not a transport
// between processes. A rank that abandons or destroys its exchange is
// seen by its peers as lost, as UCX reports a peer that died; a rank
// restarted in its place is a new exchange at a new address, which a
// survivor reaches with Disconnect and Connect.

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "bind/row_walker.h"
#include "live_exchange/side_stream.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::internal {
namespace {

using Clock = std::chrono::steady_clock;

// A message and the exchange that sent it (Node::id).
struct Message {
  uint64_t from = 0;
  std::vector<uint8_t> bytes;
};

// One rank's end: the messages sent to it, by tag.
struct Node {
  uint64_t id = 0;  // its address's number, never reused
  std::mutex mu;
  std::condition_variable arrived;
  std::map<uint64_t, Message> mailbox;
  std::atomic<bool> lost{false};
};

// The process's nodes by address. Addresses are never reused, so a rank
// made again (a restarted rank) has an address of its own, and one that
// was abandoned (still listed) shadows nothing.
struct Fabric {
  std::mutex mu;
  std::map<std::string, std::weak_ptr<Node>> nodes;
  uint64_t next = 0;
};

Fabric& TheFabric() {
  static Fabric* fabric = new Fabric;
  return *fabric;
}

struct Peer {
  std::shared_ptr<Node> node;
  std::string name;
};

// The in-process exchange takes no settings.
Status CheckOptions(const PeerExchangeOptions& options) {
  if (options.empty()) return Status::OK();
  return Status::InvalidArgument("peer exchange \"inproc\" has no setting \"" +
                                 options.settings[0].first +
                                 "\" (it takes none)");
}

struct Range {
  uint32_t peer;
  uint64_t address, length;
  bool dropped = false;  // its peer was disconnected
};

class InprocExchange final : public PeerExchange {
 public:
  static Result<std::unique_ptr<PeerExchange>> Make(
      const PeerExchangeConfig& config) {
    RESHARD_RETURN_NOT_OK(CheckOptions(config.options));
    auto ex = std::unique_ptr<InprocExchange>(new InprocExchange);
    Fabric& f = TheFabric();
    std::lock_guard<std::mutex> lock(f.mu);
    ex->node_->id = f.next++;
    ex->address_ = "inproc:" + std::to_string(ex->node_->id);
    f.nodes[ex->address_] = ex->node_;
    return std::unique_ptr<PeerExchange>(std::move(ex));
  }

  // A destroyed exchange is gone: its peers see it lost.
  ~InprocExchange() override {
    node_->lost = true;
    Fabric& f = TheFabric();
    std::lock_guard<std::mutex> lock(f.mu);
    f.nodes.erase(address_);
  }

  // Reads and messages are both memory copies: reading skips the
  // mailbox.
  PeerExchangeCapabilities capabilities() const override {
    return {.pull_on_one_host = true};
  }

  Result<std::string> Address() override { return address_; }

  Result<std::string> RegisterMemory(void* address, uint64_t length) override {
    return std::to_string(reinterpret_cast<uint64_t>(address)) + ":" +
           std::to_string(length);
  }

  Status Connect(uint32_t peer, const std::string& address,
                 std::string name) override {
    if (peers_.count(peer)) return Status::OK();
    std::shared_ptr<Node> node;
    {
      Fabric& f = TheFabric();
      std::lock_guard<std::mutex> lock(f.mu);
      auto it = f.nodes.find(address);
      if (it != f.nodes.end()) node = it->second.lock();
    }
    if (node == nullptr) {
      return Status::Unavailable("cannot connect to " + name +
                                 ": no in-process exchange at address \"" +
                                 address + "\" in this process");
    }
    peers_.emplace(peer, Peer{std::move(node), std::move(name)});
    ++connections_made_;
    return Status::OK();
  }

  // Drops the peer, its keys and the messages its exchange left in this
  // rank's mailbox (not those of a replacement that may already have
  // sent); nothing waits on the peer.
  Status Disconnect(uint32_t peer) override {
    auto it = peers_.find(peer);
    if (it == peers_.end()) return Status::OK();
    const uint64_t gone = it->second.node->id;
    peers_.erase(it);
    for (Range& r : ranges_) {
      if (r.peer == peer) r.dropped = true;
    }
    std::lock_guard<std::mutex> lock(node_->mu);
    std::erase_if(node_->mailbox,
                  [&](const auto& m) { return m.second.from == gone; });
    return Status::OK();
  }

  uint64_t connections_made() const override { return connections_made_; }

  Status WireUp(Clock::time_point, const std::function<Status()>&) override {
    return PeerFailure();
  }

  Result<uint64_t> ImportRemoteKey(uint32_t peer,
                                   const std::string& packed) override {
    if (!peers_.count(peer)) {
      return Status::Internal("remote key of unconnected rank " +
                              std::to_string(peer));
    }
    const size_t colon = packed.find(':');
    uint64_t address = 0, length = 0;
    if (colon == std::string::npos ||
        !ParseNumber(packed.substr(0, colon), &address) ||
        !ParseNumber(packed.substr(colon + 1), &length)) {
      return Status::InvalidArgument("malformed in-process remote key \"" +
                                     packed + "\" of rank " +
                                     std::to_string(peer));
    }
    ranges_.push_back({peer, address, length});
    return ranges_.size() - 1;
  }

  Status PeerFailure() const override {
    for (const auto& [r, p] : peers_) {
      if (p.node->lost) {
        return Status::Unavailable(p.name +
                                   " was lost (its exchange was "
                                   "abandoned or destroyed)");
      }
    }
    return Status::OK();
  }

  void Progress(std::chrono::microseconds idle_wait) override {
    std::this_thread::sleep_for(
        std::min<std::chrono::microseconds>(idle_wait, kLongestWait));
  }

  Status Run(const std::vector<ExchangeOp>& ops,
             const ExchangeRunOptions& options, ExchangeStats* stats) override {
    ExchangeStats unused;
    ExchangeStats& st = stats != nullptr ? *stats : unused;
    bool first = true;
    auto completed = [&](size_t i) {
      if (first && options.on_first_completion) options.on_first_completion();
      first = false;
      if (options.on_completion) options.on_completion(i);
    };
    // Sends never block (mailboxes are unbounded), so every rank posts all
    // of its sends before it waits for a receive: no cycle can deadlock.
    for (size_t i = 0; i < ops.size(); ++i) {
      const ExchangeOp& op = ops[i];
      if (op.kind == ExchangeOp::Kind::kReceive) continue;
      RESHARD_RETURN_NOT_OK(op.kind == ExchangeOp::Kind::kSend
                                ? Send(op, options, st)
                                : Get(op, st));
      completed(i);
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      const ExchangeOp& op = ops[i];
      if (op.kind != ExchangeOp::Kind::kReceive) continue;
      RESHARD_RETURN_NOT_OK(Receive(op, options, st));
      completed(i);
    }
    return Status::OK();
  }

  void Abandon() override { node_->lost = true; }

 private:
  static constexpr std::chrono::microseconds kLongestWait{2000};

  InprocExchange() : node_(std::make_shared<Node>()) {}

  static bool ParseNumber(const std::string& s, uint64_t* out) {
    if (s.empty() || s.size() > 20) return false;
    uint64_t v = 0;
    for (char c : s) {
      if (c < '0' || c > '9') return false;
      if (__builtin_mul_overflow(v, 10, &v) ||
          __builtin_add_overflow(v, static_cast<uint64_t>(c - '0'), &v)) {
        return false;
      }
    }
    *out = v;
    return true;
  }

  static uint64_t Tag(const ExchangeOp& op, const ExchangeRunOptions& options) {
    return (uint64_t{options.session_tag} << 32) | op.region->region;
  }

  static void CountShape(const ExchangeOp& op, const SideStream& stream,
                         ExchangeStats& st) {
    if (!stream.contiguous()) ++st.packed_messages;
    if (!op.more.empty()) st.coalesced_regions += op.more.size() + 1;
  }

  Result<const Peer*> PeerOf(const ExchangeOp& op) const {
    auto it = peers_.find(op.peer);
    if (it == peers_.end()) {
      return Status::Internal("exchange operation names unconnected rank " +
                              std::to_string(op.peer));
    }
    return &it->second;
  }

  Status Send(const ExchangeOp& op, const ExchangeRunOptions& options,
              ExchangeStats& st) {
    RESHARD_ASSIGN_OR_RETURN(const Peer* peer, PeerOf(op));
    if (peer->node->lost) {
      return Status::Unavailable(DescribeExchangeOp(op, peer->name) +
                                 ": the peer was lost");
    }
    const SideStream stream = SideStream::Of(op);
    std::vector<uint8_t> message(stream.total_bytes);
    stream.Pack(0, stream.total_bytes, message.data());
    CountShape(op, stream, st);
    {
      std::lock_guard<std::mutex> lock(peer->node->mu);
      peer->node->mailbox[Tag(op, options)] = {node_->id, std::move(message)};
    }
    peer->node->arrived.notify_all();
    ++st.messages_sent;
    st.bytes_sent += stream.total_bytes;
    return Status::OK();
  }

  // Reads the source directly: both ends are memory of this process.
  Status Get(const ExchangeOp& op, ExchangeStats& st) {
    RESHARD_ASSIGN_OR_RETURN(const Peer* peer, PeerOf(op));
    const BoundRegion& region = *op.region;
    if (op.remote_key >= ranges_.size() ||
        ranges_[op.remote_key].peer != op.peer ||
        ranges_[op.remote_key].dropped ||
        region.source_address < ranges_[op.remote_key].address ||
        region.source_address >=
            ranges_[op.remote_key].address + ranges_[op.remote_key].length) {
      return Status::InvalidArgument(DescribeExchangeOp(op, peer->name) +
                                     ": no key of the peer covers its source");
    }
    const bool whole = StridedSide::Source(region).contiguous() &&
                       StridedSide::Target(region).Merged().contiguous();
    const uint64_t rows = RowCount(region);
    CopyRegionSegments(region, 0, rows);
    st.gets += whole ? 1 : rows;
    ++st.messages_received;
    st.bytes_received += region.bytes;
    return Status::OK();
  }

  // Waits for the message of `op`'s tag, polling the deadline, the peer's
  // health and `poll_abort`.
  Status Receive(const ExchangeOp& op, const ExchangeRunOptions& options,
                 ExchangeStats& st) {
    RESHARD_ASSIGN_OR_RETURN(const Peer* peer, PeerOf(op));
    const uint64_t tag = Tag(op, options);
    std::vector<uint8_t> message;
    auto last_poll = Clock::now();
    while (true) {
      {
        std::unique_lock<std::mutex> lock(node_->mu);
        auto it = node_->mailbox.find(tag);
        if (it == node_->mailbox.end()) {
          node_->arrived.wait_for(lock, kLongestWait);
          it = node_->mailbox.find(tag);
        }
        if (it != node_->mailbox.end()) {
          message = std::move(it->second.bytes);
          node_->mailbox.erase(it);
          break;
        }
      }
      if (peer->node->lost) {
        return Status::Unavailable(DescribeExchangeOp(op, peer->name) +
                                   ": the peer was lost");
      }
      const auto now = Clock::now();
      if (now >= options.deadline) {
        return Status::Unavailable("timed out " +
                                   DescribeExchangeOp(op, peer->name));
      }
      if (options.poll_abort &&
          now - last_poll >= options.abort_poll_interval) {
        last_poll = now;
        RESHARD_RETURN_NOT_OK(options.poll_abort());
      }
    }
    const SideStream stream = SideStream::Of(op);
    ++st.messages_received;
    st.bytes_received += message.size();
    if (op.buffer != nullptr && message.size() <= op.buffer_bytes) {
      // An empty message has no data to copy (its data() may be null).
      if (!message.empty()) {
        std::memcpy(op.buffer, message.data(), message.size());
      }
      *op.received = message.size();
      return Status::OK();
    }
    if (message.size() != op.bytes()) {
      return Status::DataLoss(DescribeExchangeOp(op, peer->name) +
                              ": received " + std::to_string(message.size()) +
                              " bytes, expected " + std::to_string(op.bytes()));
    }
    CountShape(op, stream, st);
    stream.Unpack(0, stream.total_bytes, message.data());
    return Status::OK();
  }

  std::shared_ptr<Node> node_;
  std::string address_;
  std::map<uint32_t, Peer> peers_;
  std::vector<Range> ranges_;  // imported keys, by handle
  uint64_t connections_made_ = 0;
};

}  // namespace

// Nothing names this file: the library links its layer whole.
static const bool kRegistered =
    RegisterPeerExchange({"inproc",
                          "ranks as threads of one process (tests of the "
                          "session without a network)",
                          &InprocExchange::Make, &CheckOptions})
        .ok();

}  // namespace reshard::internal
