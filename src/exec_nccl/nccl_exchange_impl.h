// The NCCL exchange's class (nccl_exchange.h states what it does): its
// connections in nccl_exchange.cc, Run() in nccl_run.cc.

#ifndef RESHARD_EXEC_NCCL_NCCL_EXCHANGE_IMPL_H_
#define RESHARD_EXEC_NCCL_NCCL_EXCHANGE_IMPL_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "exec_nccl/nccl_api.h"
#include "exec_nccl/nccl_m2n_mover.h"
#include "exec_nccl/nccl_memory.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::nccl {

// One connected peer: the pair's communicator and stream.
struct Connection {
  std::string name;
  CommHandle comm = 0;
  cuda::StreamHandle stream = 0;
  bool ready = false;  // the communicator finished initialising
  // Why the communicator was aborted (a failed run); OK while usable.
  Status broken;
};

struct PairRun;  // one peer's part of a Run (nccl_run.cc)

class NcclExchange final : public PeerExchange {
 public:
  NcclExchange(uint32_t rank, std::shared_ptr<NcclApi> api,
               std::unique_ptr<NcclMemory> memory, int device, M2nMode m2n);
  ~NcclExchange() override;

  // Never pull (no kGet); the memory kind of the memory implementation
  // (CUDA for the library, host for the emulation).
  PeerExchangeCapabilities capabilities() const override {
    return {.pull_on_one_host = false, .memory_kinds = {memory_->kind()}};
  }
  Result<std::string> Address() override;
  Result<std::string> RegisterMemory(void* address, uint64_t length) override;
  Status Connect(uint32_t peer, const std::string& address,
                 std::string name) override;
  Status Disconnect(uint32_t peer) override;
  uint64_t connections_made() const override { return connections_made_; }
  Status WireUp(std::chrono::steady_clock::time_point deadline,
                const std::function<Status()>& poll_abort) override;
  Result<uint64_t> ImportRemoteKey(uint32_t peer,
                                   const std::string& packed) override;
  Status PeerFailure() const override;
  void Progress(std::chrono::microseconds idle_wait) override;
  Status Run(const std::vector<ExchangeOp>& ops,
             const ExchangeRunOptions& options, ExchangeStats* stats) override;
  void Abandon() override {
    abandoned_ = true;
    if (mover_) mover_->Abandon();
  }
  // The M2N mover, when the exchange offers M2N (m2n=auto and a way to
  // run it).
  TensorMover* tensor_mover() override { return mover_.get(); }

 private:
  // Ready once the communicator finished initialising (false while it
  // still is); its asynchronous error names the peer.
  Result<bool> Ready(Connection& c);
  // Aborts the connection's communicator after a failed run.
  void Break(Connection& c, const Status& why);
  // Run()'s parts (nccl_run.cc).
  Status CheckOps(const std::vector<ExchangeOp>& ops);
  Status Step(PairRun& pair, const std::vector<ExchangeOp>& ops,
              const ExchangeRunOptions& options, ExchangeStats& st,
              bool* advanced);
  Status PostCounts(PairRun& pair, const ExchangeRunOptions& options);
  Status PostManifests(PairRun& pair, const std::vector<ExchangeOp>& ops);
  Status PostMessages(PairRun& pair, const std::vector<ExchangeOp>& ops,
                      ExchangeStats& st);
  Status MatchIncoming(PairRun& pair, const std::vector<ExchangeOp>& ops);
  Status Unpack(PairRun& pair, const std::vector<ExchangeOp>& ops,
                ExchangeStats& st);
  void Finish(PairRun& pair);

  uint32_t rank_;
  std::shared_ptr<NcclApi> api_;
  std::unique_ptr<NcclMemory> memory_;
  int device_;
  std::string address_;
  std::vector<NcclUniqueId> ids_;  // for lower ranks, by rank
  std::vector<bool> ids_used_;
  std::map<uint32_t, Connection> peers_;
  uint64_t connections_made_ = 0;
  bool abandoned_ = false;
  M2nMode m2n_;
  // Made with the address (rank 0's carries its communicator's id); after
  // api_, so that it is destroyed first.
  std::unique_ptr<NcclM2nMover> mover_;
};

}  // namespace reshard::nccl

#endif  // RESHARD_EXEC_NCCL_NCCL_EXCHANGE_IMPL_H_
