// The peer exchange over UCX (registered as "ucx"): a context and a worker
// per rank, an endpoint per peer, registrations of the sources a pull
// session reads and the peers' keys unpacked once per range, kept by peer
// so that a peer can be disconnected (and reconnected at a new address)
// alone.

#include <algorithm>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "live_ucx/ucx_exchange.h"
#include "live_ucx/ucx_handles.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::internal {
namespace {

class UcxPeerExchange final : public PeerExchange {
 public:
  static Result<std::unique_ptr<PeerExchange>> Make(
      const PeerExchangeConfig& config) {
    RESHARD_ASSIGN_OR_RETURN(UcxOptions options,
                             UcxOptionsFromSettings(config.options));
    RESHARD_ASSIGN_OR_RETURN(auto context, UcxContext::Make(options));
    RESHARD_ASSIGN_OR_RETURN(const uint64_t types, context.MemoryTypes());
    RESHARD_ASSIGN_OR_RETURN(auto kinds, UcxMemoryKinds(types, options.memory));
    auto ex = std::unique_ptr<UcxPeerExchange>(
        new UcxPeerExchange(std::move(options), std::move(kinds)));
    ex->context_.emplace(std::move(context));
    RESHARD_ASSIGN_OR_RETURN(auto worker, UcxWorker::Make(*ex->context_));
    ex->worker_.emplace(std::move(worker));
    return std::unique_ptr<PeerExchange>(std::move(ex));
  }

  // Keys before the endpoints they were unpacked for, endpoints before the
  // worker, the worker before the context (reverse order of creation).
  ~UcxPeerExchange() override {
    rkeys_.clear();
    mems_.clear();
    peers_.clear();
    worker_.reset();
    context_.reset();
  }

  // UCX chooses its transports (shared memory and CMA on one host): its
  // RMA gets beat its tagged messages there (pull 9.1 GB/s, push 7.3;
  // docs/live.md). With the transports named (TCP, say) messages win.
  // CUDA memory where UCX supports it and the "memory" setting allows.
  PeerExchangeCapabilities capabilities() const override {
    return {.pull_on_one_host = ucx_.tls.empty(), .memory_kinds = kinds_};
  }

  Result<std::string> Address() override { return worker_->Address(); }

  Result<std::string> RegisterMemory(void* address, uint64_t length) override {
    RESHARD_ASSIGN_OR_RETURN(auto m,
                             UcxMemory::Map(*context_, address, length));
    mems_.push_back(std::move(m));
    return mems_.back()->packed_key();
  }

  Status Connect(uint32_t peer, const std::string& address,
                 std::string name) override {
    if (peers_.count(peer)) return Status::OK();
    RESHARD_ASSIGN_OR_RETURN(
        auto ep, UcxEndpoint::Connect(*worker_, address, std::move(name),
                                      ResolveErrorHandling(ucx_)));
    if (endpoints_.size() <= peer) endpoints_.resize(peer + 1, nullptr);
    endpoints_[peer] = ep.get();
    peers_.emplace(peer, std::move(ep));
    ++connections_made_;
    return Status::OK();
  }

  // The peer's keys go before its endpoint (they were unpacked for it).
  // The close is forced: a healthy endpoint gets up to a second of
  // progress to finish it, one in error none (its peer is gone, and UCX
  // 1.13's TCP transport is best not progressed on its account). An
  // endpoint whose close UCX still holds is kept until exit.
  Status Disconnect(uint32_t peer) override {
    auto it = peers_.find(peer);
    if (it == peers_.end()) return Status::OK();
    rkeys_.erase(peer);
    endpoints_[peer] = nullptr;
    std::unique_ptr<UcxEndpoint> ep = std::move(it->second);
    peers_.erase(it);
    const auto wait = ep->failure().ok()
                          ? std::chrono::microseconds(std::chrono::seconds(1))
                          : std::chrono::microseconds(0);
    if (!ep->Close(wait)) KeepUntilExit(ep.release());
    return Status::OK();
  }

  uint64_t connections_made() const override { return connections_made_; }

  Status WireUp(std::chrono::steady_clock::time_point deadline,
                const std::function<Status()>& poll_abort) override {
    std::vector<UcxEndpoint*> endpoints;
    for (auto& [r, ep] : peers_) endpoints.push_back(ep.get());
    return internal::WireUp(*worker_, endpoints, deadline, poll_abort);
  }

  Result<uint64_t> ImportRemoteKey(uint32_t peer,
                                   const std::string& packed) override {
    auto it = peers_.find(peer);
    if (it == peers_.end()) {
      return Status::Internal("remote key of unconnected rank " +
                              std::to_string(peer));
    }
    RESHARD_ASSIGN_OR_RETURN(
        auto key, UcxRemoteKey::Unpack(*it->second, packed, MovesCudaMemory()));
    const auto handle = reinterpret_cast<uint64_t>(key->get());
    rkeys_[peer].push_back(std::move(key));
    return handle;
  }

  Status PeerFailure() const override {
    for (const auto& [r, ep] : peers_) {
      if (!ep->failure().ok()) return ep->failure();
    }
    return Status::OK();
  }

  void Progress(std::chrono::microseconds idle_wait) override {
    worker_->ProgressOrWait(idle_wait);
  }

  Status Run(const std::vector<ExchangeOp>& ops,
             const ExchangeRunOptions& options, ExchangeStats* stats) override {
    if (MovesCudaMemory()) {
      RESHARD_RETURN_NOT_OK(
          RefusePackedDeviceMemory(*context_, endpoints_, ops));
    }
    return RunUcxExchange(*worker_, endpoints_, ops, options, stats);
  }

  // See UcxWorker::Abandon: after a peer failure UCX 1.13 may assert when
  // its resources are progressed or torn down again.
  void Abandon() override {
    for (auto& [r, keys] : rkeys_) {
      for (auto& k : keys) k->Abandon();
    }
    for (auto& m : mems_) m->Abandon();
    for (auto& [r, ep] : peers_) ep->Abandon();
    if (worker_) worker_->Abandon();
    if (context_) context_->Abandon();
  }

 private:
  UcxPeerExchange(UcxOptions ucx, std::vector<MemoryKind> kinds)
      : ucx_(std::move(ucx)), kinds_(std::move(kinds)) {}

  bool MovesCudaMemory() const {
    return std::find(kinds_.begin(), kinds_.end(), MemoryKind::kCuda) !=
           kinds_.end();
  }

  const UcxOptions ucx_;
  const std::vector<MemoryKind> kinds_;  // UcxMemoryKinds
  std::optional<UcxContext> context_;
  std::optional<UcxWorker> worker_;
  std::map<uint32_t, std::unique_ptr<UcxEndpoint>> peers_;
  UcxEndpointsByRank endpoints_;  // peers_ by rank
  std::vector<std::unique_ptr<UcxMemory>> mems_;
  // Keys unpacked for each peer's endpoint.
  std::map<uint32_t, std::vector<std::unique_ptr<UcxRemoteKey>>> rkeys_;
  uint64_t connections_made_ = 0;
};

}  // namespace

// Nothing names this file: the library links its layer whole.
static const bool kRegistered =
    RegisterPeerExchange(
        {"ucx",
         "between processes and hosts (UCX: shared memory, CMA, TCP)",
         &UcxPeerExchange::Make,
         [](const PeerExchangeOptions& options) {
           return UcxOptionsFromSettings(options).status();
         },
         {{"tls", "transports (UCX_TLS), e.g. cma,tcp or tcp", {}},
          {"net_devices", "network devices (UCX_NET_DEVICES), e.g. lo", {}},
          {"error_handling",
           "peer (UCX reports peer failures; excludes CMA and shared "
           "memory), none, or auto (peer for tcp only)",
           {"auto", "peer", "none"}}}})
        .ok();

}  // namespace reshard::internal
