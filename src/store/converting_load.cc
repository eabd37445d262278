#include "store/converting_load.h"

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>

#include "bind/apply_conversion.h"
#include "bind/binding_copy.h"
#include "reshard/api.h"
#include "util/host_memory.h"

namespace reshard::internal {
namespace {

using Bindings = std::vector<WeightRuntimeBindingManifest>;
using TensorSet = std::set<std::string, std::less<>>;

// The caller's bindings of the tensors that do not convert, as bindings
// of `part` (their staging fragments are the targets themselves).
Result<Bindings> PlainBindings(const ConversionPlan& plan,
                               const WeightPlacementManifest& part,
                               const Bindings& targets) {
  Bindings out;
  for (const auto& b : targets) {
    std::vector<RuntimeBindingFragment> fragments;
    for (const RuntimeBindingFragment& f : b.fragments()) {
      const std::string& staged =
          plan.StagingFragmentOf(f.placement_fragment_id());
      if (staged.empty() || part.FindFragment(staged) == nullptr) continue;
      RuntimeBindingFragmentSpec spec = SpecOf(f);
      spec.placement_fragment_id = staged;
      RESHARD_ASSIGN_OR_RETURN(auto made,
                               RuntimeBindingFragment::Make(std::move(spec)));
      fragments.push_back(std::move(made));
    }
    if (fragments.empty()) continue;
    RESHARD_ASSIGN_OR_RETURN(auto made,
                             RebuiltBinding(b, part, std::move(fragments)));
    out.push_back(std::move(made));
  }
  return out;
}

}  // namespace

Result<WeightPlacementManifest> PartOf(const WeightPlacementManifest& staging,
                                       const TensorSet& tensors) {
  std::vector<TensorDescriptor> descriptors;
  for (const TensorDescriptor& t : staging.tensors()) {
    if (tensors.count(t.tensor_id())) descriptors.push_back(t);
  }
  std::vector<PlacementFragment> fragments;
  for (const PlacementFragment* f : staging.fragments()) {
    if (tensors.count(f->tensor_id())) fragments.push_back(*f);
  }
  return WeightPlacementManifest::FromFragments(
      staging.header(), staging.topology(), std::move(descriptors),
      std::move(fragments));
}

void AddLoadReport(const LoadReport& part, LoadReport* total) {
  total->bytes += part.bytes;
  total->bytes_read += part.bytes_read;
  total->read_requests += part.read_requests;
  total->ranges += part.ranges;
  total->chunks_verified += part.chunks_verified;
  total->regions += part.regions;
  total->bytes_copied += part.bytes_copied;
  total->staging_bytes = std::max(total->staging_bytes, part.staging_bytes);
  total->conversion_bytes =
      std::max(total->conversion_bytes, part.conversion_bytes);
}

namespace {

// One group of converting tensors: staging buffers for the caller's
// participants, loaded, then converted into the targets.
class GroupLoad {
 public:
  GroupLoad(const ConversionPlan& plan, const Bindings& targets,
            const std::unordered_map<std::string, void*>& target_memory)
      : plan_(plan), targets_(targets), target_memory_(target_memory) {}

  Status Run(const TensorSet& tensors, uint32_t threads, const PartLoad& load,
             LoadReport* report) {
    RESHARD_ASSIGN_OR_RETURN(auto part, PartOf(plan_.staging(), tensors));
    std::vector<HostBuffer> owned;
    std::unordered_map<std::string, void*> staged;
    std::vector<CheckedBindings> bindings;
    uint64_t bytes = 0;
    for (const auto& b : targets_) {
      const WeightPlacementPart* p = part.FindPart(b.participant_id());
      if (p == nullptr || p->fragments().empty()) continue;
      for (const PlacementFragment& f : p->fragments()) {
        owned.push_back(AllocateHostBytes(f.nbytes()));
        if (owned.back() == nullptr) {
          return Status::ResourceExhausted(
              "cannot allocate " + std::to_string(f.nbytes()) +
              " staging bytes for fragment " + f.placement_fragment_id() +
              " of " + f.tensor_id());
        }
        bytes += f.nbytes();
        staged[f.placement_fragment_id()] = owned.back().get();
      }
      BufferBindingOptions o;
      o.instance_id = b.instance_id();
      o.generation = b.generation();
      o.lease_id = b.lease_id();
      RESHARD_ASSIGN_OR_RETURN(
          auto bound, BindCheckedBuffers(
                          part, b.participant_id(),
                          [&](std::string_view id) -> void* {
                            auto it = staged.find(std::string(id));
                            return it == staged.end() ? nullptr : it->second;
                          },
                          o));
      bindings.push_back(std::move(bound));
    }
    if (bindings.empty()) return Status::OK();
    report->conversion_bytes = std::max(report->conversion_bytes, bytes);
    RESHARD_ASSIGN_OR_RETURN(
        CheckedBindings checked,
        CheckedBindings::Merge(part, bindings, BindingCoverage::kSubset));
    RESHARD_ASSIGN_OR_RETURN(LoadReport loaded, load(part, checked));
    AddLoadReport(loaded, report);
    // The targets of this group's tensors (and of the scales their
    // quantization produces).
    std::unordered_map<std::string, void*> targets;
    for (const auto& [id, address] : target_memory_) {
      const PlacementFragment* f = plan_.target().FindFragment(id);
      const TensorConversion* c = plan_.Find(f->tensor_id());
      const std::string& of = Produced(f->tensor_id());
      if ((c != nullptr && tensors.count(f->tensor_id())) ||
          (!of.empty() && tensors.count(of))) {
        targets[id] = address;
      }
    }
    return ApplyConversions(plan_, FragmentMemoryIn(staged),
                            FragmentMemoryIn(targets), std::max(1u, threads));
  }

 private:
  // The weight whose quantization produces scale tensor `id`, or "".
  const std::string& Produced(const std::string& id) const {
    static const std::string kNone;
    for (const TensorConversion& c : plan_.conversions()) {
      if (c.kind == ConversionKind::kQuantize && c.scale_tensor_id == id) {
        return c.tensor_id;
      }
    }
    return kNone;
  }

  const ConversionPlan& plan_;
  const Bindings& targets_;
  const std::unordered_map<std::string, void*>& target_memory_;
};

}  // namespace

Result<LoadReport> LoadConverting(const ConversionPlan& plan,
                                  const Bindings& target_bindings,
                                  uint64_t staging_budget, uint32_t threads,
                                  const PartLoad& load) {
  // Tensors by role: converting (with the scale they read, staged with
  // them) or plain; the caller's staging bytes of each.
  TensorSet plain;
  std::map<std::string, TensorSet, std::less<>> converting;
  std::unordered_map<std::string, void*> target_memory;
  for (const TensorConversion& c : plan.conversions()) {
    TensorSet& unit = converting[c.tensor_id];
    unit.insert(c.tensor_id);
    if (c.kind == ConversionKind::kDequantize) unit.insert(c.scale_tensor_id);
  }
  TensorSet staged_scales;
  for (const auto& [id, unit] : converting) {
    staged_scales.insert(unit.begin(), unit.end());
  }
  for (const TensorDescriptor& t : plan.staging().tensors()) {
    if (!staged_scales.count(t.tensor_id())) plain.insert(t.tensor_id());
  }
  std::map<std::string, uint64_t, std::less<>> bytes;  // staged, by tensor
  for (const auto& b : target_bindings) {
    for (const RuntimeBindingFragment& f : b.fragments()) {
      const PlacementFragment* t =
          plan.target().FindFragment(f.placement_fragment_id());
      if (t == nullptr || plain.count(t->tensor_id())) continue;
      RESHARD_RETURN_NOT_OK(RequireContiguousHost(
          f, "a converting load", "target", b.participant_id()));
      target_memory[f.placement_fragment_id()] =
          reinterpret_cast<void*>(f.address());
    }
    const WeightPlacementPart* p = plan.staging().FindPart(b.participant_id());
    if (p == nullptr) continue;
    for (const PlacementFragment& f : p->fragments()) {
      bytes[f.tensor_id()] += f.nbytes();
    }
  }
  LoadReport report;
  if (!plain.empty()) {
    RESHARD_ASSIGN_OR_RETURN(auto part, PartOf(plan.staging(), plain));
    RESHARD_ASSIGN_OR_RETURN(auto bindings,
                             PlainBindings(plan, part, target_bindings));
    if (!bindings.empty()) {
      // The targets' own views under staging ids: bindings of `part`,
      // checked once here.
      auto checked = CheckedBindings::Make(part, std::move(bindings),
                                           BindingCoverage::kSubset);
      if (!checked.ok()) return checked.status().WithContext("target bindings");
      RESHARD_ASSIGN_OR_RETURN(LoadReport loaded, load(part, *checked));
      AddLoadReport(loaded, &report);
    }
  }
  GroupLoad group_load(plan, target_bindings, target_memory);
  TensorSet group;
  uint64_t group_bytes = 0;
  for (const auto& [id, unit] : converting) {
    uint64_t unit_bytes = 0;
    for (const std::string& t : unit) unit_bytes += bytes[t];
    if (!group.empty() && group_bytes + unit_bytes > staging_budget) {
      RESHARD_RETURN_NOT_OK(group_load.Run(group, threads, load, &report));
      group.clear();
      group_bytes = 0;
    }
    group.insert(unit.begin(), unit.end());
    group_bytes += unit_bytes;
  }
  if (!group.empty()) {
    RESHARD_RETURN_NOT_OK(group_load.Run(group, threads, load, &report));
  }
  return report;
}

}  // namespace reshard::internal
