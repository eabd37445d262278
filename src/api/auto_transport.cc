#include "api/auto_transport.h"

#include <map>
#include <mutex>
#include <string>
#include <utility>

namespace reshard::internal {

namespace {

class AutoTransport final : public Transport {
 public:
  AutoTransport(std::unique_ptr<Transport> local, CudaTransportFactory cuda)
      : local_(std::move(local)), make_cuda_(std::move(cuda)) {
    caps_ = local_->capabilities();
    caps_.name = "auto";
    caps_.memory_kinds = {MemoryKind::kHost, MemoryKind::kCuda};
  }

  const TransportCapabilities& capabilities() const override { return caps_; }

  Result<TransferId> Submit(const BoundTransferPlan& plan) override {
    Status host_only = plan.RequireMemoryKinds({MemoryKind::kHost}, "local");
    Transport* t = local_.get();
    if (!host_only.ok()) {
      RESHARD_ASSIGN_OR_RETURN(t, Cuda(host_only));
    }
    RESHARD_ASSIGN_OR_RETURN(TransferId inner, t->Submit(plan));
    std::lock_guard<std::mutex> lock(mu_);
    const TransferId id = next_id_++;
    routes_[id] = {t, inner};
    return id;
  }

  Result<TransferState> Poll(TransferId id) override {
    RESHARD_ASSIGN_OR_RETURN(Route r, Find(id));
    return r.transport->Poll(r.inner);
  }

  Status Wait(TransferId id) override {
    RESHARD_ASSIGN_OR_RETURN(Route r, Find(id));
    return r.transport->Wait(r.inner);
  }

 private:
  struct Route {
    Transport* transport = nullptr;
    TransferId inner = 0;
  };

  Result<Route> Find(TransferId id) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = routes_.find(id);
    if (it == routes_.end()) {
      return Status::NotFound("no transfer " + std::to_string(id));
    }
    return it->second;
  }

  // The CUDA executor; where there is none, the local executor's refusal
  // of the plan's first CUDA fragment and the reason.
  Result<Transport*> Cuda(const Status& host_refusal) {
    std::lock_guard<std::mutex> lock(mu_);
    if (cuda_ == nullptr) {
      Result<std::unique_ptr<Transport>> made = make_cuda_();
      if (!made.ok()) {
        return Status::FailedPrecondition(host_refusal.message() + "; " +
                                          made.status().message());
      }
      cuda_ = std::move(*made);
    }
    return cuda_.get();
  }

  std::unique_ptr<Transport> local_;
  CudaTransportFactory make_cuda_;
  TransportCapabilities caps_;
  std::mutex mu_;
  std::unique_ptr<Transport> cuda_;
  std::map<TransferId, Route> routes_;
  TransferId next_id_ = 1;
};

}  // namespace

Result<std::unique_ptr<Transport>> MakeAutoTransport(
    const LocalTransportOptions& local, CudaTransportFactory cuda) {
  RESHARD_ASSIGN_OR_RETURN(std::unique_ptr<LocalTransport> l,
                           LocalTransport::Make(local));
  return std::unique_ptr<Transport>(
      std::make_unique<AutoTransport>(std::move(l), std::move(cuda)));
}

}  // namespace reshard::internal
