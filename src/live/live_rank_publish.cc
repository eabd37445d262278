// LiveRank (live_rank.h), steps 1 and 2: publish this rank's bindings,
// address and keys; plan, read what the others published, choose push or
// pull and bind.
#include <algorithm>

#include "live/live_rank.h"
#include "reshard/plan.h"

namespace reshard::live_internal {

Status LiveRank::Publish() {
  RESHARD_ASSIGN_OR_RETURN(
      exchange_, MakePeerExchange(options_.exchange,
                                  {options_.rank, options_.exchange_options}));
  RESHARD_ASSIGN_OR_RETURN(std::string address, exchange_->Address());
  // Peers read and write the mirrors of CUDA fragments, not the devices.
  RESHARD_ASSIGN_OR_RETURN(bindings_, Mirrored(bindings_, /*adopt=*/true));
  for (size_t i = 0; i < bindings_.sources.size(); ++i) {
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key("bindings") + "/source-" + std::to_string(i),
                     WeightRuntimeBindingToJson(bindings_.sources[i])));
  }
  for (size_t i = 0; i < bindings_.targets.size(); ++i) {
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key("bindings") + "/target-" + std::to_string(i),
                     WeightRuntimeBindingToJson(bindings_.targets[i])));
  }
  RESHARD_RETURN_NOT_OK(
      records_.Put(records_.Key("address"),
                   internal::EncodeAddressRecord(options_.rank, address)));
  // Deltas are pushed (a source encodes what it sends).
  may_pull_ = options_.protocol == LiveProtocol::kPull ||
              (options_.protocol == LiveProtocol::kAuto &&
               exchange_->capabilities().pull_on_one_host &&
               !options_.movable_sources && !options_.delta);
  // CUDA sources that the pipeline stages are never read by a peer: a
  // session with any CUDA fragment pushes (PlanAndBind), and a host-only
  // exchange could not register device memory.
  const bool staged_sources =
      PipelineStaging() && HasCudaFragment(bindings_.sources);
  if (may_pull_ && !bindings_.sources.empty() && !staged_sources) {
    RESHARD_RETURN_NOT_OK(RegisterSources());
  }
  if (options_.heartbeat_interval.count() > 0) {
    RESHARD_ASSIGN_OR_RETURN(
        heartbeat_,
        Heartbeat::Start(store_, options_.session + "/", options_.rank,
                         options_.heartbeat_interval, first_beat_));
  }
  if (!options_.target_declaration.empty()) {
    RESHARD_RETURN_NOT_OK(
        records_.Put(records_.Key("declared"), options_.target_declaration));
  }
  records_.WatchPeers();
  RESHARD_RETURN_NOT_OK(
      records_.Put(records_.Key("rank"),
                   internal::EncodeRankRecord({HostName(), options_.rank,
                                               options_.ranks, incarnation_})));
  Stage("published");
  return Status::OK();
}

Status LiveRank::RegisterSources() {
  std::vector<RemoteRange> ranges;
  for (const auto& b : bindings_.sources) {
    for (const auto& f : b.fragments()) {
      const uint64_t length = std::max<uint64_t>(f.nbytes(), 1);
      RESHARD_ASSIGN_OR_RETURN(
          std::string key, exchange_->RegisterMemory(
                               reinterpret_cast<void*>(f.address()), length));
      ranges.push_back({f.address(), length, std::move(key)});
    }
  }
  return records_.Put(records_.Key("rkeys"),
                      internal::EncodeRemoteKeysRecord(options_.rank, ranges));
}

namespace {

// Every rank's bindings of one side as one checked set: those equal to a
// binding of `proof` (this rank's, checked when bound) keep their proof,
// the others are checked once here (CheckedBindings::Replace). Errors as
// BoundTransferPlan::Bind's: "<side> bindings: ...".
Result<CheckedBindings> CheckWorldSide(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& world,
    const std::optional<CheckedBindings>& proof, std::string_view side) {
  const std::string context = std::string(side) + " bindings";
  Result<CheckedBindings> checked = Status::Internal("not checked");
  if (proof.has_value()) {
    Status st = proof->RequireFor(placement);
    checked = st.ok() ? proof->Replace(placement, world) : st;
  } else {
    checked = CheckedBindings::Make(placement, world, BindingCoverage::kSubset);
  }
  if (!checked.ok()) return checked.status().WithContext(context);
  return checked;
}

}  // namespace

Status LiveRank::PlanAndBind() {
  RESHARD_ASSIGN_OR_RETURN(auto plan,
                           LogicalTransferPlan::Make(source_, target_));
  plan_.emplace(std::move(plan));
  report_.regions = plan_->regions().size();
  const auto waiting = Clock::now();
  RESHARD_RETURN_NOT_OK(records_.WaitForAll("rank", Deadline(), nullptr));
  waited_seconds_ = Seconds(waiting);
  RESHARD_RETURN_NOT_OK(CheckDeclarations());
  RESHARD_ASSIGN_OR_RETURN(world_, ReadWorld(records_, store_, options_));
  pull_ = options_.protocol == LiveProtocol::kPull;
  if (options_.protocol == LiveProtocol::kAuto && may_pull_) {
    pull_ = true;  // when every rank runs on this host
    for (uint32_t r = 0; r < options_.ranks && pull_; ++r) {
      pull_ = world_.hosts[r] == HostName();
    }
    // The pipeline moves CUDA fragments by push only: decided alike on
    // every rank, from the published bindings.
    if (pull_ && PipelineStaging() &&
        (HasCudaFragment(world_.sources) || HasCudaFragment(world_.targets))) {
      pull_ = false;
    }
  }
  if (options_.shadow_targets && !bindings_.targets.empty()) {
    RESHARD_ASSIGN_OR_RETURN(bindings_.targets,
                             shadow_.Shadow(bindings_.targets));
    Replace(bindings_.targets, world_.targets);
  }
  RESHARD_ASSIGN_OR_RETURN(CheckedBindings sources,
                           CheckWorldSide(source_, world_.sources,
                                          bindings_.checked_sources, "source"));
  RESHARD_ASSIGN_OR_RETURN(CheckedBindings targets,
                           CheckWorldSide(target_, world_.targets,
                                          bindings_.checked_targets, "target"));
  RESHARD_ASSIGN_OR_RETURN(
      auto bound,
      BoundTransferPlan::Bind(*plan_, source_, sources, target_, targets));
  bound_.emplace(std::move(bound));
  if (device_) RESHARD_RETURN_NOT_OK(device_->Classify(bound_->regions()));
  RESHARD_RETURN_NOT_OK(StageDeviceRegions());
  // Only the memory kinds the exchange moves, on every rank alike: a
  // device pointer is never handed to an exchange that takes it for host
  // memory.
  return bound_->RequireMemoryKinds(exchange_->capabilities().memory_kinds,
                                    options_.exchange);
}

Status LiveRank::CheckDeclarations() {
  if (!options_.check_target_declaration) return Status::OK();
  for (uint32_t r = 0; r < options_.ranks; ++r) {
    if (r == options_.rank) continue;
    const std::string key = records_.Key("declared", r);
    Result<std::string> text = records_.Get(key);
    std::string declaration;
    if (text.ok()) {
      declaration = std::move(*text);
    } else if (!text.status().IsNotFound()) {
      return text.status().WithContext(key);
    }
    if (declaration.size() > kMaxTargetDeclarationBytes) {
      return Status::InvalidArgument(
          key + ": a declaration of " + std::to_string(declaration.size()) +
          " bytes (at most " + std::to_string(kMaxTargetDeclarationBytes) +
          ")");
    }
    RESHARD_RETURN_NOT_OK(options_.check_target_declaration(r, declaration));
  }
  return Status::OK();
}

}  // namespace reshard::live_internal
