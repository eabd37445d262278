// BindBuffers and Reshard: the steps a framework would otherwise write out
// (binding specs, coverage, plan, bind, fence, submit, wait) in one place.

#include <chrono>
#include <optional>
#include <unordered_set>

#include "api/auto_transport.h"
#include "api/convert_reshard.h"
#include "reshard/api.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/backends/local_transport.h"
#include "reshard/bound_plan.h"

namespace reshard {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// What a buffer lookup found for one fragment: a pointer, or nothing.
using BufferFinder =
    std::function<std::optional<void*>(const std::string& fragment_id)>;

std::string BindContext(std::string_view participant_id) {
  return "cannot bind buffers of participant " + std::string(participant_id);
}

// The part of `participant_id`, which must own fragments.
Result<const WeightPlacementPart*> PartToBind(
    const WeightPlacementManifest& placement, std::string_view participant_id) {
  const WeightPlacementPart* part = placement.FindPart(participant_id);
  if (part == nullptr) {
    return Status::InvalidArgument(BindContext(participant_id) +
                                   ": not a participant of placement " +
                                   placement.placement_id());
  }
  if (part->fragments().empty()) {
    return Status::InvalidArgument(BindContext(participant_id) +
                                   ": it owns no fragments and needs no "
                                   "binding");
  }
  return part;
}

// The runtime view of `f` at `buffer`: contiguous row-major, the view is
// its whole allocation.
RuntimeBindingFragmentSpec ViewOf(const PlacementFragment& f,
                                  const TensorDescriptor& tensor, void* buffer,
                                  const BufferBindingOptions& options) {
  RuntimeBindingFragmentSpec r;
  r.placement_fragment_id = f.placement_fragment_id();
  r.runtime_fragment_id = options.instance_id + ":" + f.placement_fragment_id();
  r.address = reinterpret_cast<uint64_t>(buffer);
  r.nbytes = f.nbytes();
  r.worker_id = options.worker_id;
  r.endpoint = options.endpoint;
  r.device = options.device;
  r.itemsize = tensor.itemsize();
  r.local_shape = f.local_shape();
  // A shape whose strides overflow is refused by the placement already;
  // an empty stride list is refused by RuntimeBindingFragment::Make.
  r.strides_bytes =
      CanonicalStrides(f.local_shape(), tensor.itemsize()).value_or(Dims{});
  r.storage_address = r.address;
  r.storage_nbytes = f.nbytes();
  r.owner = options.owner;
  return r;
}

// One participant's fragments, each bound where `find` says, unchecked.
Result<WeightRuntimeBindingManifest> DescribeWith(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const BufferFinder& find, const BufferBindingOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(const WeightPlacementPart* part,
                           PartToBind(placement, participant_id));
  const std::string context = BindContext(participant_id);
  WeightRuntimeBindingManifestSpec spec{
      placement.resource_id(), placement.placement_id(), placement.digest(),
      options.instance_id,     options.generation,       options.lease_id,
      placement.revision(),    part->participant_id(),   {}};
  spec.fragments.reserve(part->fragments().size());
  for (const PlacementFragment& f : part->fragments()) {
    const std::string& id = f.placement_fragment_id();
    const std::optional<void*> buffer = find(id);
    if (!buffer.has_value() || *buffer == nullptr) {
      return Status::InvalidArgument(context + ": " +
                                     (buffer.has_value() ? "null" : "no") +
                                     " buffer for placement fragment " + id +
                                     " (tensor " + f.tensor_id() + ")");
    }
    const TensorDescriptor* tensor = placement.FindTensor(f.tensor_id());
    auto view =
        RuntimeBindingFragment::Make(ViewOf(f, *tensor, *buffer, options));
    if (!view.ok()) return view.status().WithContext(context);
    spec.fragments.push_back(std::move(view).ValueOrDie());
  }
  auto binding = WeightRuntimeBindingManifest::Make(std::move(spec));
  if (!binding.ok()) return binding.status().WithContext(context);
  return binding;
}

// The same, checked once.
Result<CheckedBindings> BindWith(const WeightPlacementManifest& placement,
                                 std::string_view participant_id,
                                 const BufferFinder& find,
                                 const BufferBindingOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      WeightRuntimeBindingManifest binding,
      DescribeWith(placement, participant_id, find, options));
  auto checked = CheckedBindings::Make(placement, {std::move(binding)},
                                       BindingCoverage::kSubset);
  if (!checked.ok()) {
    return checked.status().WithContext(BindContext(participant_id));
  }
  return checked;
}

// The one binding of a set BindWith made.
Result<WeightRuntimeBindingManifest> OnlyBinding(
    Result<CheckedBindings> checked) {
  RESHARD_RETURN_NOT_OK(checked.status());
  return checked->bindings().front();
}

template <typename Map>
BufferFinder FinderOf(const Map& buffers) {
  return [&buffers](const std::string& id) -> std::optional<void*> {
    auto it = buffers.find(id);
    if (it == buffers.end()) return std::nullopt;
    return it->second;
  };
}

// kEveryOwner: one binding for every participant with fragments
// (the message of ValidateRuntimeBindings' require-all rule, with the
// side); the bindings themselves are checked by Bind (or were, when they
// come as CheckedBindings).
Status CheckSideCoverage(
    const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    std::string_view side) {
  std::unordered_set<std::string_view> bound;
  for (const auto& b : bindings) bound.insert(b.participant_id());
  for (const WeightPlacementPart& part : placement.parts()) {
    if (!part.fragments().empty() && !bound.count(part.participant_id())) {
      return Status::InvalidArgument(std::string(side) +
                                     " bindings: missing runtime binding "
                                     "participant: " +
                                     part.participant_id());
    }
  }
  return Status::OK();
}

const std::vector<WeightRuntimeBindingManifest>& ListOf(
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  return bindings;
}
const std::vector<WeightRuntimeBindingManifest>& ListOf(
    const CheckedBindings& bindings) {
  return bindings.bindings();
}

// The source side of a converting reshard, checked once (if it is not
// yet).
Result<CheckedBindings> CheckedSource(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  auto checked =
      CheckedBindings::Make(source, bindings, BindingCoverage::kSubset);
  if (!checked.ok()) return checked.status().WithContext("source bindings");
  return checked;
}
Result<CheckedBindings> CheckedSource(const WeightPlacementManifest&,
                                      const CheckedBindings& bindings) {
  return bindings;
}

// A converting reshard (plan.conversion()).
template <typename Bindings>
Result<ReshardReport> Converting(const LogicalTransferPlan& plan,
                                 const WeightPlacementManifest& source,
                                 const Bindings& source_bindings,
                                 const WeightPlacementManifest& target,
                                 const Bindings& target_bindings,
                                 Transport& transport,
                                 const ReshardOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(CheckedBindings sources,
                           CheckedSource(source, source_bindings));
  return internal::ReshardConverting(plan, source, sources, target,
                                     ListOf(target_bindings), transport,
                                     options);
}

template <typename Bindings>
Status CheckCoverage(const WeightPlacementManifest& source,
                     const Bindings& source_bindings,
                     const WeightPlacementManifest& target,
                     const Bindings& target_bindings,
                     const ReshardOptions& options) {
  if (options.coverage != BindingCoverage::kEveryOwner) {
    return Status::OK();
  }
  RESHARD_RETURN_NOT_OK(
      CheckSideCoverage(source, ListOf(source_bindings), "source"));
  return CheckSideCoverage(target, ListOf(target_bindings), "target");
}

// The generation and lease fence, right before the bytes move. Without a
// current_bindings callback the bindings just bound are the current ones,
// and comparing them with themselves cannot fail, so nothing is checked.
Status Fence(const BoundTransferPlan& bound, const ReshardOptions& options) {
  if (!options.current_bindings) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(CurrentBindings now, options.current_bindings());
  return bound.CheckCurrent(now.sources, now.targets);
}

// Submits `bound` and waits for it to be terminal.
Status Transfer(const BoundTransferPlan& bound, Transport& transport) {
  RESHARD_ASSIGN_OR_RETURN(TransferId id, transport.Submit(bound));
  return transport.Wait(id);
}

// Bind, fence, submit, wait: everything after the plan. Plain bindings
// are checked once by Bind; CheckedBindings are not checked again.
template <typename Bindings>
Result<ReshardReport> BindAndTransfer(const LogicalTransferPlan& plan,
                                      const WeightPlacementManifest& source,
                                      const Bindings& source_bindings,
                                      const WeightPlacementManifest& target,
                                      const Bindings& target_bindings,
                                      Transport& transport,
                                      const ReshardOptions& options) {
  ReshardReport report;
  auto start = Clock::now();
  RESHARD_ASSIGN_OR_RETURN(
      BoundTransferPlan bound,
      BoundTransferPlan::Bind(plan, source, source_bindings, target,
                              target_bindings));
  report.bind_seconds = SecondsSince(start);
  start = Clock::now();
  RESHARD_RETURN_NOT_OK(Fence(bound, options));
  RESHARD_RETURN_NOT_OK(Transfer(bound, transport));
  report.transfer_seconds = SecondsSince(start);
  report.bytes = bound.bytes();
  report.regions = plan.regions().size();
  report.operations = bound.regions().size();
  report.segments = plan.summary().segments;
  return report;
}

}  // namespace

Result<CheckedBindings> BindCheckedBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const FragmentBufferLookup& buffer_of,
    const BufferBindingOptions& options) {
  if (!buffer_of) {
    return Status::InvalidArgument(BindContext(participant_id) +
                                   ": the buffer lookup is empty");
  }
  return BindWith(
      placement, participant_id,
      [&buffer_of](const std::string& id) -> std::optional<void*> {
        return buffer_of(id);
      },
      options);
}

Result<WeightRuntimeBindingManifest> BindBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const FragmentBufferLookup& buffer_of,
    const BufferBindingOptions& options) {
  return OnlyBinding(
      BindCheckedBuffers(placement, participant_id, buffer_of, options));
}

Result<CheckedBindings> BindCheckedBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::map<std::string, void*>& buffers,
    const BufferBindingOptions& options) {
  return BindWith(placement, participant_id, FinderOf(buffers), options);
}

Result<WeightRuntimeBindingManifest> BindBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::map<std::string, void*>& buffers,
    const BufferBindingOptions& options) {
  return OnlyBinding(
      BindWith(placement, participant_id, FinderOf(buffers), options));
}

Result<WeightRuntimeBindingManifest> BindBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::unordered_map<std::string, void*>& buffers,
    const BufferBindingOptions& options) {
  return OnlyBinding(
      BindWith(placement, participant_id, FinderOf(buffers), options));
}

Result<WeightRuntimeBindingManifest> DescribeBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::map<std::string, void*>& buffers,
    const BufferBindingOptions& options) {
  return DescribeWith(placement, participant_id, FinderOf(buffers), options);
}

Result<CheckedBindings> BindAllBuffers(const WeightPlacementManifest& placement,
                                       const FragmentBufferLookup& buffer_of,
                                       const BufferBindingOptions& options) {
  std::vector<CheckedBindings> parts;
  for (const WeightPlacementPart& part : placement.parts()) {
    if (part.fragments().empty()) continue;
    RESHARD_ASSIGN_OR_RETURN(
        auto binding, BindCheckedBuffers(placement, part.participant_id(),
                                         buffer_of, options));
    parts.push_back(std::move(binding));
  }
  auto all = CheckedBindings::Merge(placement, parts);
  if (!all.ok()) {
    return all.status().WithContext("cannot bind buffers of placement " +
                                    placement.placement_id());
  }
  return all;
}

namespace {

// The Reshard overloads, for plain bindings (checked once, by Bind) and
// checked ones alike.
template <typename Bindings>
Result<ReshardReport> ReshardWithPlan(const LogicalTransferPlan& plan,
                                      const WeightPlacementManifest& source,
                                      const Bindings& source_bindings,
                                      const WeightPlacementManifest& target,
                                      const Bindings& target_bindings,
                                      Transport& transport,
                                      const ReshardOptions& options) {
  if (plan.conversion() != nullptr &&
      target.placement_id() != plan.target_placement_id()) {
    return Converting(plan, source, source_bindings, target, target_bindings,
                      transport, options);
  }
  RESHARD_RETURN_NOT_OK(
      CheckCoverage(source, source_bindings, target, target_bindings, options));
  return BindAndTransfer(plan, source, source_bindings, target, target_bindings,
                         transport, options);
}

template <typename Bindings>
Result<ReshardReport> PlanAndReshard(const WeightPlacementManifest& source,
                                     const Bindings& source_bindings,
                                     const WeightPlacementManifest& target,
                                     const Bindings& target_bindings,
                                     Transport& transport,
                                     const ReshardOptions& options) {
  // Missing bindings are reported before the (longer) planning.
  RESHARD_RETURN_NOT_OK(
      CheckCoverage(source, source_bindings, target, target_bindings, options));
  const auto start = Clock::now();
  RESHARD_ASSIGN_OR_RETURN(
      LogicalTransferPlan plan,
      LogicalTransferPlan::Make(source, target, options.plan));
  const double plan_seconds = SecondsSince(start);
  RESHARD_ASSIGN_OR_RETURN(
      ReshardReport report,
      plan.conversion() != nullptr
          ? Converting(plan, source, source_bindings, target, target_bindings,
                       transport, options)
          : BindAndTransfer(plan, source, source_bindings, target,
                            target_bindings, transport, options));
  report.plan_seconds = plan_seconds;
  return report;
}

template <typename Bindings>
Result<ReshardReport> ReshardLocally(const WeightPlacementManifest& source,
                                     const Bindings& source_bindings,
                                     const WeightPlacementManifest& target,
                                     const Bindings& target_bindings,
                                     const ReshardOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      std::unique_ptr<Transport> transport,
      internal::MakeAutoTransport({.threads = options.threads},
                                  [] { return MakeCudaTransport(); }));
  return PlanAndReshard(source, source_bindings, target, target_bindings,
                        *transport, options);
}

}  // namespace

Result<ReshardReport> Reshard(const LogicalTransferPlan& plan,
                              const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              const ReshardOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      std::unique_ptr<Transport> transport,
      internal::MakeAutoTransport({.threads = options.threads},
                                  [] { return MakeCudaTransport(); }));
  return ReshardWithPlan(plan, source, source_bindings, target, target_bindings,
                         *transport, options);
}

Result<ReshardReport> Reshard(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options) {
  return ReshardWithPlan(plan, source, source_bindings, target, target_bindings,
                         transport, options);
}

Result<ReshardReport> Reshard(const LogicalTransferPlan& plan,
                              const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              Transport& transport,
                              const ReshardOptions& options) {
  return ReshardWithPlan(plan, source, source_bindings, target, target_bindings,
                         transport, options);
}

Result<ReshardReport> Reshard(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options) {
  return PlanAndReshard(source, source_bindings, target, target_bindings,
                        transport, options);
}

Result<ReshardReport> Reshard(const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              Transport& transport,
                              const ReshardOptions& options) {
  return PlanAndReshard(source, source_bindings, target, target_bindings,
                        transport, options);
}

Result<ReshardReport> Reshard(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    const ReshardOptions& options) {
  return ReshardLocally(source, source_bindings, target, target_bindings,
                        options);
}

Result<ReshardReport> Reshard(const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              const ReshardOptions& options) {
  return ReshardLocally(source, source_bindings, target, target_bindings,
                        options);
}

}  // namespace reshard
