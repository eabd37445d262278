#include "exec_m2n/m2n_plan_split.h"

#include <algorithm>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace reshard::m2n {
namespace {

std::map<std::string, int, std::less<>> RankInOrder(
    const WeightPlacementManifest& m, int first) {
  std::vector<const TopologyParticipant*> order;
  for (const TopologyParticipant& p : m.topology().participants()) {
    order.push_back(&p);
  }
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->rank < b->rank ||
           (a->rank == b->rank && a->participant_id < b->participant_id);
  });
  std::map<std::string, int, std::less<>> out;
  for (const TopologyParticipant* p : order) {
    out.emplace(p->participant_id, first + static_cast<int>(out.size()));
  }
  return out;
}

// Each tensor's boxes on one side, by tensor id.
Result<std::map<std::string, std::vector<M2nBox>, std::less<>>> BoxesOf(
    const WeightPlacementManifest& m,
    const std::map<std::string, int, std::less<>>& ranks,
    std::string_view side) {
  std::map<std::string, std::vector<M2nBox>, std::less<>> out;
  for (const WeightPlacementPart& part : m.parts()) {
    if (part.fragments().empty()) continue;
    auto it = ranks.find(part.participant_id());
    if (it == ranks.end()) {
      return Status::InvalidArgument(std::string(side) + " participant " +
                                     part.participant_id() +
                                     " has no communicator rank");
    }
    for (const PlacementFragment& f : part.fragments()) {
      out[f.tensor_id()].push_back(
          M2nBox{it->second, f.global_offset(), f.local_shape()});
    }
  }
  return out;
}

M2nDecision StoredSource(const std::string& tensor_id) {
  return M2nDecision{tensor_id, std::nullopt, "live-source",
                     "tensor \"" + tensor_id +
                         "\": not lowered to ncclReshard: rule live-source: "
                         "the source is a store revision, not ranks of the "
                         "communicator"};
}

}  // namespace

M2nRanks DefaultM2nRanks(const WeightPlacementManifest& source,
                         const WeightPlacementManifest& target) {
  M2nRanks ranks;
  ranks.source = RankInOrder(source, 0);
  ranks.target = RankInOrder(target, static_cast<int>(ranks.source.size()));
  ranks.comm_size = static_cast<int>(ranks.source.size() + ranks.target.size());
  return ranks;
}

Result<std::vector<M2nDecision>> SplitPlanForM2n(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const M2nRanks& ranks) {
  std::vector<M2nDecision> out;
  if (plan.source_kind() == PlanSourceKind::kStoredManifest) {
    for (const std::string& id : plan.tensors()) {
      out.push_back(StoredSource(id));
    }
    return out;
  }
  if (plan.source_placement_id() != source.placement_id() ||
      (plan.conversion() == nullptr &&
       plan.target_placement_id() != target.placement_id())) {
    return Status::InvalidArgument(
        "the placements given are not those the plan was made from");
  }
  RESHARD_ASSIGN_OR_RETURN(auto source_boxes,
                           BoxesOf(source, ranks.source, "source"));
  RESHARD_ASSIGN_OR_RETURN(auto target_boxes,
                           BoxesOf(target, ranks.target, "target"));
  for (const std::string& id : plan.tensors()) {
    const TensorDescriptor* s = source.FindTensor(id);
    const TensorDescriptor* t = target.FindTensor(id);
    if (s == nullptr || t == nullptr) {
      return Status::InvalidArgument("tensor \"" + id +
                                     "\" of the plan is missing from a side");
    }
    M2nTensorInput in{id,
                      s->global_shape(),
                      s->dtype(),
                      t->dtype(),
                      std::move(source_boxes[id]),
                      std::move(target_boxes[id]),
                      ranks.comm_size};
    out.push_back(LowerTensorToM2n(in));
  }
  return out;
}

bool ContiguousView(const RuntimeBindingFragment& view,
                    const PlacementFragment& fragment) {
  if (view.local_shape() != fragment.local_shape()) return false;
  const std::optional<Dims> strides =
      CanonicalStrides(fragment.local_shape(), view.itemsize());
  return strides.has_value() && *strides == view.strides_bytes() &&
         view.nbytes() == fragment.nbytes();
}

namespace {

// The first participant of `m` whose binding of a fragment of `tensor` is
// missing or not contiguous, as the refusal's detail; "" when none.
std::string NotContiguous(
    const WeightPlacementManifest& m,
    const std::map<std::string_view, const WeightRuntimeBindingManifest*>&
        bindings,
    const std::string& tensor, std::string_view side) {
  for (const WeightPlacementPart& part : m.parts()) {
    for (const PlacementFragment& f : part.fragments()) {
      if (f.tensor_id() != tensor) continue;
      auto it = bindings.find(part.participant_id());
      const RuntimeBindingFragment* view =
          it == bindings.end()
              ? nullptr
              : it->second->FindFragment(f.placement_fragment_id());
      if (view == nullptr || !ContiguousView(*view, f)) {
        std::string shape = "[";
        for (size_t d = 0; d < f.local_shape().size(); ++d) {
          shape += (d == 0 ? "" : ",") + std::to_string(f.local_shape()[d]);
        }
        return std::string(side) + " participant " + part.participant_id() +
               " fragment " + f.placement_fragment_id() +
               (view == nullptr ? " has no binding"
                                : " is not one contiguous row-major buffer "
                                  "of its local shape " +
                                      shape + "]");
      }
    }
  }
  return "";
}

std::map<std::string_view, const WeightRuntimeBindingManifest*> ByParticipant(
    const std::vector<WeightRuntimeBindingManifest>& bindings) {
  std::map<std::string_view, const WeightRuntimeBindingManifest*> out;
  for (const auto& b : bindings) out.emplace(b.participant_id(), &b);
  return out;
}

}  // namespace

void RequireContiguousBindings(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    std::vector<M2nDecision>* decisions) {
  const auto sources = ByParticipant(source_bindings);
  const auto targets = ByParticipant(target_bindings);
  for (M2nDecision& d : *decisions) {
    if (!d.m2n) continue;
    std::string why = NotContiguous(source, sources, d.tensor_id, "source");
    if (why.empty())
      why = NotContiguous(target, targets, d.tensor_id, "target");
    if (why.empty()) continue;
    d.m2n.reset();
    d.rule = "contiguous-binding";
    d.reason =
        "tensor \"" + d.tensor_id +
        "\": not lowered to ncclReshard: rule contiguous-binding: " + why;
  }
}

}  // namespace reshard::m2n
