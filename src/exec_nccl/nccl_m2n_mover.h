// The NCCL exchange's tensor mover (sdk/peer_exchange.h TensorMover):
// whole tensors moved by NCCL M2N's ncclReshard over one communicator of
// every session rank (communicator rank = session rank), the others left
// to the exchange's send/recv.
//
// Which tensors: SplitPlanForM2n over the session's ranks (the lowering's
// rules, m2n_lowering.h), then rule contiguous-binding
// (RequireContiguousBindings) over every participant's published
// bindings, and none at all unless every rank's address says it offers
// M2N (rule m2n-everywhere: a rank with m2n=off, or over the library
// without the plugin, turns it off for the session). All of it is
// published data, so every rank decides alike without a round of its own.
//
// The communicator: rank 0's address carries one more NCCL unique id
// (after "/m2n:"), the others' the mark "/m2n"; Adopt starts
// ncclCommInitRank over every rank when a tensor was adopted, and the
// exchange's WireUp waits for it. A Disconnect (a rank replaced) breaks it
// for good: later Runs fail naming the rank.
//
// The binding contract already makes every checked view the canonical
// contiguous one of its fragment, so contiguous-binding refuses only
// bindings that bypassed those checks.
//
// Run: this rank's buffers are its current bindings' views of the adopted
// tensors' fragments (buffers moved by a rebind are followed), each still
// one contiguous row-major buffer of its local shape (else
// FailedPrecondition, rule contiguous-binding: a rank cannot fall back to
// regions alone).
// With api=host the bytes move through the host emulation
// (m2n_host_emulation.h), polled against the deadline and poll_abort;
// with the library through M2nBackend (the plugin), on the default stream,
// its completion polled (M2nBackend::Query) with the communicator's
// asynchronous error against the same deadline and poll_abort; a wait
// that gives up aborts the communicator (ncclCommAbort), so nothing is
// left in flight, and it is broken for good.

#ifndef RESHARD_EXEC_NCCL_NCCL_M2N_MOVER_H_
#define RESHARD_EXEC_NCCL_NCCL_M2N_MOVER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "exec_m2n/m2n_backend.h"
#include "exec_m2n/m2n_host_emulation.h"
#include "exec_m2n/m2n_lowering.h"
#include "exec_nccl/nccl_api.h"
#include "reshard/sdk/peer_exchange.h"

namespace reshard::nccl {

// How the exchange moves whole tensors (setting m2n, and the api).
enum class M2nMode : uint8_t {
  kOff,      // m2n=off, or the library without the M2N plugin
  kHost,     // api=host: the host emulation of ncclReshard
  kLibrary,  // the M2N plugin over the library's communicator
};

// The address's suffix: "/m2n:<id hex>" on rank 0, "/m2n" on the others.
inline constexpr char kM2nMark[] = "/m2n";

// Waits for this rank's part of a posted ncclReshard group, polling
// `done` against options' deadline (Unavailable, `timeout`) and
// poll_abort (its status); on either it calls `withdraw`, which returns
// false when the group finished meanwhile (the wait then goes on). The
// emulation's and the library's waits are this one loop.
Status AwaitM2nGroup(const std::function<Result<bool>()>& done,
                     const std::function<bool()>& withdraw,
                     const ExchangeRunOptions& options,
                     const std::string& timeout);

class NcclM2nMover final : public TensorMover {
 public:
  // `world_id`: the id rank 0 published (rank 0 only; the others read it
  // from rank 0's address at Adopt).
  NcclM2nMover(uint32_t rank, NcclApi* api, M2nMode mode, int device,
               NcclUniqueId world_id)
      : rank_(rank),
        api_(api),
        mode_(mode),
        device_(device),
        world_id_(world_id) {}
  ~NcclM2nMover() override;

  Result<std::vector<std::string>> Adopt(const TensorMoveSetup& setup) override;
  Status Run(const std::vector<WeightRuntimeBindingManifest>& sources,
             const std::vector<WeightRuntimeBindingManifest>& targets,
             const ExchangeRunOptions& options) override;

  // For WireUp: true once the communicator is ready (or none is needed).
  Result<bool> Ready();
  // A rank was disconnected: the communicator is broken for good.
  void Break(uint32_t peer);
  // After a failed session: releases nothing.
  void Abandon() { abandoned_ = true; }

 private:
  // One adopted tensor: its descriptors, and this rank's fragments of it.
  struct Adopted {
    m2n::M2nTensor tensor;
    std::string source_participant, source_fragment;
    std::string target_participant, target_fragment;
    std::optional<PlacementFragment> source_box, target_box;
  };
  Status StartComm(const TensorMoveSetup& setup);
  Result<std::vector<m2n::M2nBuffers>> Buffers(
      const std::vector<WeightRuntimeBindingManifest>& sources,
      const std::vector<WeightRuntimeBindingManifest>& targets) const;
  Status RunHost(const std::vector<m2n::M2nBuffers>& buffers,
                 const ExchangeRunOptions& options);
  Status RunLibrary(const std::vector<m2n::M2nBuffers>& buffers,
                    const ExchangeRunOptions& options);

  uint32_t rank_;
  NcclApi* api_;
  M2nMode mode_;
  int device_;
  NcclUniqueId world_id_;
  uint32_t ranks_ = 0;
  std::vector<Adopted> adopted_;
  CommHandle comm_ = 0;
  bool ready_ = false;
  Status broken_;
  bool abandoned_ = false;
  std::shared_ptr<m2n::HostM2nComm> host_;
  std::unique_ptr<m2n::M2nBackend> backend_;
};

}  // namespace reshard::nccl

#endif  // RESHARD_EXEC_NCCL_NCCL_M2N_MOVER_H_
