#include "live/live_conversion.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <utility>

#include "bind/apply_conversion.h"

namespace reshard::live_internal {
namespace {

RuntimeBindingFragmentSpec SpecOf(const RuntimeBindingFragment& f) {
  return {f.placement_fragment_id(),
          f.runtime_fragment_id(),
          f.address(),
          f.nbytes(),
          f.worker_id(),
          f.endpoint(),
          f.device(),
          f.itemsize(),
          f.local_shape(),
          f.strides_bytes(),
          f.storage_address(),
          f.storage_nbytes(),
          f.storage_offset_bytes(),
          f.owner()};
}

// The caller's fragment `u` of a converting tensor: contiguous host memory.
Status RequireContiguousHost(const RuntimeBindingFragment& u,
                             std::string_view side,
                             std::string_view participant) {
  const auto canonical = CanonicalStrides(u.local_shape(), u.itemsize());
  const auto kind = MemoryKindOfDevice(u.device());
  if (canonical.has_value() && *canonical == u.strides_bytes() && kind.ok() &&
      *kind == MemoryKind::kHost) {
    return Status::OK();
  }
  return Status::InvalidArgument(
      "a converting live session needs contiguous host memory: " +
      std::string(side) + " fragment " + u.placement_fragment_id() + " of " +
      std::string(participant));
}

// A fragment of this object's buffer `address` for wire fragment `f`,
// routed like the caller's fragment `like`.
Result<RuntimeBindingFragment> OwnedFragment(const PlacementFragment& f,
                                             int64_t itemsize, void* address,
                                             const RuntimeBindingFragment& like) {
  const auto strides = CanonicalStrides(f.local_shape(), itemsize);
  const uint64_t at = reinterpret_cast<uint64_t>(address);
  return RuntimeBindingFragment::Make({f.placement_fragment_id(),
                                       f.placement_fragment_id() + ":convert",
                                       at, f.nbytes(), like.worker_id(),
                                       like.endpoint(), like.device(), itemsize,
                                       f.local_shape(), strides.value_or(Dims{}),
                                       at, f.nbytes(), 0, nullptr});
}

Result<WeightRuntimeBindingManifest> Rebuilt(
    const WeightRuntimeBindingManifest& user,
    const WeightPlacementManifest& placement,
    std::vector<RuntimeBindingFragment> fragments) {
  return WeightRuntimeBindingManifest::Make(
      {user.resource_id(), placement.placement_id(), placement.digest(),
       user.instance_id(), user.generation(), user.lease_id(), user.revision(),
       user.participant_id(), std::move(fragments)});
}

internal::FragmentMemory LookupOf(
    const std::unordered_map<std::string, void*>& map) {
  return [&map](std::string_view id) -> void* {
    auto it = map.find(std::string(id));
    return it == map.end() ? nullptr : it->second;
  };
}

}  // namespace

Result<std::unique_ptr<LiveConversion>> LiveConversion::Make(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const ConversionOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(auto wire_source,
                           QuantizedSourcePlacement(source, target, options));
  RESHARD_ASSIGN_OR_RETURN(
      auto source_plan,
      ConversionPlan::Make(ConversionPlan::LookupIn(source), wire_source,
                           options));
  RESHARD_ASSIGN_OR_RETURN(
      auto target_plan,
      ConversionPlan::Make(ConversionPlan::LookupIn(wire_source), target,
                           options));
  return std::unique_ptr<LiveConversion>(
      new LiveConversion(std::move(wire_source), std::move(source_plan),
                         std::move(target_plan)));
}

Result<void*> LiveConversion::Buffer(const std::string& id, uint64_t bytes) {
  internal::HostBuffer& b = owned_[id];
  if (b == nullptr) {
    b = internal::AllocateHostBytes(bytes);
    if (b == nullptr) {
      return Status::ResourceExhausted("cannot allocate " +
                                       std::to_string(bytes) +
                                       " conversion bytes for fragment " + id);
    }
    buffer_bytes_ += bytes;
  }
  return static_cast<void*>(b.get());
}

Result<LiveBindings> LiveConversion::Translate(const LiveBindings& user,
                                               bool adopt) {
  LiveBindings out;
  for (const auto& b : user.sources) {
    RESHARD_ASSIGN_OR_RETURN(auto wire, TranslateSource(b, adopt));
    out.sources.push_back(std::move(wire));
  }
  for (const auto& b : user.targets) {
    RESHARD_ASSIGN_OR_RETURN(auto wire, TranslateTarget(b, adopt));
    out.targets.push_back(std::move(wire));
  }
  return out;
}

Result<WeightRuntimeBindingManifest> LiveConversion::TranslateSource(
    const WeightRuntimeBindingManifest& user, bool adopt) {
  if (source_plan_.empty()) return user;
  const std::string& p = user.participant_id();
  const WeightPlacementPart* part = wire_source_.FindPart(p);
  if (part == nullptr || user.fragments().empty()) {
    // Not a source participant, or nothing bound: the session names it.
    return user;
  }
  const RuntimeBindingFragment& like = user.fragments().front();
  std::vector<RuntimeBindingFragment> fragments;
  for (const PlacementFragment& f : part->fragments()) {
    const std::string& id = f.placement_fragment_id();
    const TensorConversion* c = source_plan_.Find(f.tensor_id());
    const std::string& staged = source_plan_.StagingFragmentOf(id);
    if (c == nullptr && !staged.empty()) {
      // Travels as it is: the staging fragment is the caller's own.
      const RuntimeBindingFragment* u = user.FindFragment(staged);
      if (u == nullptr) {
        return Status::InvalidArgument("source binding of " + p +
                                       " lacks fragment " + staged + " of " +
                                       f.tensor_id());
      }
      RuntimeBindingFragmentSpec spec = SpecOf(*u);
      spec.placement_fragment_id = id;
      RESHARD_ASSIGN_OR_RETURN(auto made,
                               RuntimeBindingFragment::Make(std::move(spec)));
      fragments.push_back(std::move(made));
      continue;
    }
    if (c != nullptr) {
      const RuntimeBindingFragment* u = user.FindFragment(staged);
      if (u == nullptr) {
        return Status::InvalidArgument("source binding of " + p +
                                       " lacks fragment " + staged + " of " +
                                       f.tensor_id());
      }
      RESHARD_RETURN_NOT_OK(RequireContiguousHost(*u, "source", p));
      if (adopt) user_sources_[staged] = reinterpret_cast<void*>(u->address());
    }
    // The FP8 weight, or the scales its quantization produces.
    RESHARD_ASSIGN_OR_RETURN(void* buffer, Buffer(id, f.nbytes()));
    wire_sources_[id] = buffer;
    const int64_t itemsize = c != nullptr ? 1 : 4;
    RESHARD_ASSIGN_OR_RETURN(auto made,
                             OwnedFragment(f, itemsize, buffer, like));
    fragments.push_back(std::move(made));
  }
  return Rebuilt(user, wire_source_, std::move(fragments));
}

Result<WeightRuntimeBindingManifest> LiveConversion::TranslateTarget(
    const WeightRuntimeBindingManifest& user, bool adopt) {
  if (target_plan_.empty()) return user;
  const std::string& p = user.participant_id();
  const WeightPlacementManifest& staging = target_plan_.staging();
  std::vector<RuntimeBindingFragment> fragments;
  for (const RuntimeBindingFragment& u : user.fragments()) {
    const PlacementFragment* f =
        target_plan_.target().FindFragment(u.placement_fragment_id());
    const std::string& staged =
        target_plan_.StagingFragmentOf(u.placement_fragment_id());
    const TensorConversion* c =
        f == nullptr ? nullptr : target_plan_.Find(f->tensor_id());
    if (c == nullptr && !staged.empty()) {
      RuntimeBindingFragmentSpec spec = SpecOf(u);
      spec.placement_fragment_id = staged;
      RESHARD_ASSIGN_OR_RETURN(auto made,
                               RuntimeBindingFragment::Make(std::move(spec)));
      fragments.push_back(std::move(made));
      continue;
    }
    if (f == nullptr) return user;  // not of the target: the session names it
    RESHARD_RETURN_NOT_OK(RequireContiguousHost(u, "target", p));
    if (adopt) {
      user_targets_[u.placement_fragment_id()] =
          reinterpret_cast<void*>(u.address());
    }
    if (staged.empty()) continue;  // scales the target's quantization writes
    for (const std::string* id :
         {&staged, &target_plan_.StagingScaleOf(staged)}) {
      if (id->empty()) continue;
      const PlacementFragment* s = staging.FindFragment(*id);
      const int64_t itemsize = staging.FindTensor(s->tensor_id())->itemsize();
      RESHARD_ASSIGN_OR_RETURN(void* buffer, Buffer(*id, s->nbytes()));
      staged_targets_[*id] = buffer;
      RESHARD_ASSIGN_OR_RETURN(auto made,
                               OwnedFragment(*s, itemsize, buffer, u));
      fragments.push_back(std::move(made));
    }
  }
  return Rebuilt(user, staging, std::move(fragments));
}

Status LiveConversion::Quantize(uint32_t threads) const {
  if (source_plan_.empty() || wire_sources_.empty()) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = internal::ApplyConversions(
      source_plan_, LookupOf(user_sources_), LookupOf(wire_sources_), threads);
  quantize_seconds_ = std::chrono::duration<double>(
                          std::chrono::steady_clock::now() - t0)
                          .count();
  return st;
}

Status LiveConversion::Apply(uint32_t threads) const {
  if (target_plan_.empty() || user_targets_.empty()) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = internal::ApplyConversions(
      target_plan_, LookupOf(staged_targets_), LookupOf(user_targets_), threads);
  apply_seconds_ = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - t0)
                       .count();
  return st;
}

Result<std::unique_ptr<LiveWire>> MakeLiveWire(WeightPlacementManifest source,
                                               WeightPlacementManifest target,
                                               LiveBindings bindings,
                                               LiveSessionOptions options) {
  auto wire = std::make_unique<LiveWire>(std::move(source), std::move(target),
                                         std::move(options));
  if (!wire->options.convert) {
    wire->bindings = std::move(bindings);
    return wire;
  }
  wire->threads = std::clamp(std::thread::hardware_concurrency(), 1u, 8u);
  ConversionOptions c;
  c.block = wire->options.fp8_block;
  RESHARD_ASSIGN_OR_RETURN(wire->conversion,
                           LiveConversion::Make(wire->source, wire->target, c));
  LiveConversion* conversion = wire->conversion.get();
  RESHARD_ASSIGN_OR_RETURN(wire->bindings,
                           conversion->Translate(bindings, /*adopt=*/true));
  LiveSessionOptions& o = wire->options;
  if (o.current_bindings) {
    o.current_bindings = [conversion, user = std::move(o.current_bindings)]()
        -> Result<LiveBindings> {
      RESHARD_ASSIGN_OR_RETURN(LiveBindings current, user());
      return conversion->Translate(current, /*adopt=*/false);
    };
  }
  if (!o.shadow_targets) {
    o.validate_targets = [conversion, threads = wire->threads,
                          user = std::move(o.validate_targets)]() -> Status {
      RESHARD_RETURN_NOT_OK(conversion->Apply(threads));
      return user ? user() : Status::OK();
    };
  }
  return wire;
}

}  // namespace reshard::live_internal
