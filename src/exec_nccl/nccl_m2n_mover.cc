#include "exec_nccl/nccl_m2n_mover.h"

#include <chrono>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "exec_m2n/m2n_plan_split.h"

namespace reshard::nccl {
namespace {

using Clock = std::chrono::steady_clock;

// The M2N part of an address: whether it offers M2N, and rank 0's id hex.
bool OffersM2n(const std::string& address, std::string* id_hex) {
  const size_t at = address.rfind(kM2nMark);
  if (at == std::string::npos) return false;
  const std::string rest = address.substr(at + sizeof(kM2nMark) - 1);
  if (rest.empty()) return true;
  if (rest[0] != ':') return false;
  if (id_hex != nullptr) *id_hex = rest.substr(1);
  return true;
}

// Every participant's rank as the split takes it.
std::map<std::string, int, std::less<>> CommRanks(
    const std::map<std::string, uint32_t, std::less<>>& session) {
  std::map<std::string, int, std::less<>> out;
  for (const auto& [participant, rank] : session) {
    out.emplace(participant, static_cast<int>(rank));
  }
  return out;
}

// This rank's participant and fragment of `tensor` on one side, if any.
void Mine(const WeightPlacementManifest& m,
          const std::map<std::string, uint32_t, std::less<>>& ranks,
          uint32_t rank, const std::string& tensor, std::string* participant,
          std::string* fragment, std::optional<PlacementFragment>* box) {
  for (const WeightPlacementPart& part : m.parts()) {
    auto it = ranks.find(part.participant_id());
    if (it == ranks.end() || it->second != rank) continue;
    for (const PlacementFragment& f : part.fragments()) {
      if (f.tensor_id() != tensor) continue;
      *participant = part.participant_id();
      *fragment = f.placement_fragment_id();
      box->emplace(f);
      return;
    }
  }
}

// The address of this rank's view of one side's fragment (0 when the rank
// holds none), or the contiguous-binding refusal.
Result<uint64_t> ViewAddress(
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const std::string& participant, const std::string& fragment,
    const std::optional<PlacementFragment>& box, const std::string& tensor,
    const char* side) {
  if (!box) return uint64_t{0};
  for (const auto& b : bindings) {
    if (b.participant_id() != participant) continue;
    const RuntimeBindingFragment* view = b.FindFragment(fragment);
    if (view != nullptr && m2n::ContiguousView(*view, *box)) {
      return view->address();
    }
  }
  return Status::FailedPrecondition(
      "tensor \"" + tensor + "\" moves through ncclReshard, but " + side +
      " participant " + participant + "'s current binding of fragment " +
      fragment +
      " is not one contiguous row-major buffer of its local shape (rule "
      "contiguous-binding; the session decided at open, every rank alike)");
}

}  // namespace

NcclM2nMover::~NcclM2nMover() {
  if (abandoned_ || comm_ == 0) return;
  backend_.reset();
  (void)(ready_ && broken_.ok() ? api_->CommDestroy(comm_)
                                : api_->CommAbort(comm_));
}

Result<std::vector<std::string>> NcclM2nMover::Adopt(
    const TensorMoveSetup& setup) {
  const LogicalTransferPlan& plan = *setup.plan;
  std::vector<std::string> out(plan.tensors().size());
  for (uint32_t r = 0; r < setup.ranks; ++r) {
    if (!OffersM2n((*setup.addresses)[r], nullptr)) {
      for (size_t i = 0; i < out.size(); ++i) {
        out[i] = "tensor \"" + plan.tensors()[i] +
                 "\": not lowered to ncclReshard: rule m2n-everywhere: rank " +
                 std::to_string(r) +
                 " does not offer M2N (m2n=off, or api=nccl without the M2N "
                 "plugin)";
      }
      return out;
    }
  }
  m2n::M2nRanks ranks{CommRanks(*setup.source_rank),
                      CommRanks(*setup.target_rank),
                      static_cast<int>(setup.ranks)};
  RESHARD_ASSIGN_OR_RETURN(
      std::vector<m2n::M2nDecision> decisions,
      m2n::SplitPlanForM2n(plan, *setup.source, *setup.target, ranks));
  m2n::RequireContiguousBindings(*setup.source, *setup.source_bindings,
                                 *setup.target, *setup.target_bindings,
                                 &decisions);
  adopted_.clear();
  for (size_t i = 0; i < decisions.size(); ++i) {
    if (!decisions[i].m2n) {
      out[i] = decisions[i].reason;
      continue;
    }
    Adopted a{*decisions[i].m2n};
    Mine(*setup.source, *setup.source_rank, setup.rank, a.tensor.tensor_id,
         &a.source_participant, &a.source_fragment, &a.source_box);
    Mine(*setup.target, *setup.target_rank, setup.rank, a.tensor.tensor_id,
         &a.target_participant, &a.target_fragment, &a.target_box);
    adopted_.push_back(std::move(a));
  }
  ranks_ = setup.ranks;
  if (!adopted_.empty()) RESHARD_RETURN_NOT_OK(StartComm(setup));
  return out;
}

// The communicator over every rank, from the id in rank 0's address.
Status NcclM2nMover::StartComm(const TensorMoveSetup& setup) {
  if (comm_ != 0) return Status::OK();
  NcclUniqueId id = world_id_;
  if (rank_ != 0) {
    std::string hex;
    if (!OffersM2n((*setup.addresses)[0], &hex) || !UniqueIdFromHex(hex, &id)) {
      return Status::InvalidArgument(
          "rank 0's nccl address carries no M2N communicator id");
    }
  }
  RESHARD_ASSIGN_OR_RETURN(
      comm_, api_->CommInitRank(static_cast<int>(ranks_), id,
                                static_cast<int>(rank_), device_));
  if (mode_ == M2nMode::kHost) {
    RESHARD_ASSIGN_OR_RETURN(
        host_,
        m2n::HostM2nComm::Join(UniqueIdToHex(id), static_cast<int>(ranks_)));
  }
  return Status::OK();
}

Result<bool> NcclM2nMover::Ready() {
  if (!broken_.ok()) return broken_;
  if (comm_ == 0 || ready_) return true;
  Result<AsyncState> state = api_->CommGetAsyncError(comm_);
  if (!state.ok()) {
    return Status::Unavailable("the M2N communicator over every rank failed: " +
                               std::string(state.status().message()));
  }
  ready_ = *state == AsyncState::kSuccess;
  if (ready_ && mode_ == M2nMode::kLibrary) {
    RESHARD_ASSIGN_OR_RETURN(
        backend_, m2n::M2nBackend::Make(reinterpret_cast<void*>(comm_)));
  }
  return ready_;
}

void NcclM2nMover::Break(uint32_t peer) {
  if (comm_ == 0 || !broken_.ok()) return;
  (void)api_->CommAbort(comm_);
  comm_ = 0;
  backend_.reset();
  broken_ = Status::Unavailable(
      "the M2N communicator over every rank lost rank " + std::to_string(peer) +
      " (disconnected); tensors moved by ncclReshard cannot move in this "
      "session any more");
}

Result<std::vector<m2n::M2nBuffers>> NcclM2nMover::Buffers(
    const std::vector<WeightRuntimeBindingManifest>& sources,
    const std::vector<WeightRuntimeBindingManifest>& targets) const {
  std::vector<m2n::M2nBuffers> out;
  for (const Adopted& a : adopted_) {
    RESHARD_ASSIGN_OR_RETURN(
        uint64_t s,
        ViewAddress(sources, a.source_participant, a.source_fragment,
                    a.source_box, a.tensor.tensor_id, "source"));
    RESHARD_ASSIGN_OR_RETURN(
        uint64_t t,
        ViewAddress(targets, a.target_participant, a.target_fragment,
                    a.target_box, a.tensor.tensor_id, "target"));
    out.push_back({reinterpret_cast<void*>(s), reinterpret_cast<void*>(t)});
  }
  return out;
}

Status NcclM2nMover::Run(
    const std::vector<WeightRuntimeBindingManifest>& sources,
    const std::vector<WeightRuntimeBindingManifest>& targets,
    const ExchangeRunOptions& options) {
  if (adopted_.empty()) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(bool ready, Ready());
  if (!ready) {
    return Status::FailedPrecondition(
        "the M2N communicator is not wired up (WireUp first)");
  }
  RESHARD_ASSIGN_OR_RETURN(auto buffers, Buffers(sources, targets));
  if (mode_ == M2nMode::kHost) return RunHost(buffers, options);
  return RunLibrary(buffers, options);
}

Status NcclM2nMover::RunLibrary(const std::vector<m2n::M2nBuffers>& buffers,
                                const ExchangeRunOptions& options) {
  std::vector<m2n::M2nTensor> tensors;
  for (const Adopted& a : adopted_) tensors.push_back(a.tensor);
  RESHARD_RETURN_NOT_OK(backend_->Run(tensors, buffers, nullptr));
  auto done = [&]() -> Result<bool> {
    Result<AsyncState> state = api_->CommGetAsyncError(comm_);
    if (!state.ok()) {
      return Status::Unavailable("ncclReshard failed: " +
                                 std::string(state.status().message()));
    }
    return backend_->Query(nullptr);
  };
  auto withdraw = [&] {
    // Aborting the communicator ends the group on this rank; the peers'
    // parts fail with it.
    (void)api_->CommAbort(comm_);
    comm_ = 0;
    backend_.reset();
    broken_ = Status::Unavailable(
        "the M2N communicator over every rank was aborted by a failed "
        "update; tensors moved by ncclReshard cannot move in this session "
        "any more");
    return true;
  };
  Status st = AwaitM2nGroup(done, withdraw, options,
                    "timed out in ncclReshard: not every rank finished the "
                    "group of " +
                        std::to_string(tensors.size()) + " tensors");
  if (!st.ok() && comm_ != 0) (void)withdraw();
  return st;
}

Status AwaitM2nGroup(const std::function<Result<bool>()>& done,
                     const std::function<bool()>& withdraw,
                     const ExchangeRunOptions& options,
                     const std::string& timeout) {
  auto last_poll = Clock::now();
  while (true) {
    RESHARD_ASSIGN_OR_RETURN(bool finished, done());
    if (finished) return Status::OK();
    const auto now = Clock::now();
    Status stop;
    if (now >= options.deadline) {
      stop = Status::Unavailable(timeout);
    } else if (options.poll_abort &&
               now - last_poll >= options.abort_poll_interval) {
      last_poll = now;
      stop = options.poll_abort();
    }
    // Finished meanwhile when it cannot be withdrawn: wait on.
    if (!stop.ok() && withdraw()) return stop;
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

Status NcclM2nMover::RunHost(const std::vector<m2n::M2nBuffers>& buffers,
                             const ExchangeRunOptions& options) {
  std::vector<m2n::M2nTensor> tensors;
  for (const Adopted& a : adopted_) tensors.push_back(a.tensor);
  const int me = static_cast<int>(rank_);
  RESHARD_RETURN_NOT_OK(host_->Post(me, tensors, buffers));
  auto done = [&]() -> Result<bool> {
    Result<bool> finished = host_->Poll(me);
    if (!finished.ok()) {
      return Status::Internal("ncclReshard (host emulation) failed: " +
                              std::string(finished.status().message()));
    }
    return *finished;
  };
  // Not withdrawn when done meanwhile: the last rank posted first.
  auto withdraw = [&] { return host_->Abort(me); };
  return AwaitM2nGroup(done, withdraw, options,
               "timed out in ncclReshard (host emulation): not every rank "
               "joined the group of " +
                   std::to_string(tensors.size()) + " tensors");
}

}  // namespace reshard::nccl
