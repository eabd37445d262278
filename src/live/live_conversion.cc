#include "live/live_conversion.h"

#include <algorithm>
#include <chrono>
#include <thread>
#include <unordered_set>
#include <utility>

#include "bind/apply_conversion.h"
#include "bind/binding_copy.h"

namespace reshard::live_internal {

Result<std::unique_ptr<LiveConversion>> LiveConversion::Make(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target, const LiveBindings& bindings,
    const ConversionOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(
      auto quantization,
      SourceQuantization::Make(source, target, bindings.sources, options));
  RESHARD_ASSIGN_OR_RETURN(
      auto target_plan,
      ConversionPlan::Make(ConversionPlan::LookupIn(quantization.placement()),
                           target, options));
  std::unique_ptr<LiveConversion> out(
      new LiveConversion(std::move(quantization), std::move(target_plan)));
  RESHARD_ASSIGN_OR_RETURN(out->bindings_,
                           out->Translate(bindings, /*adopt=*/true));
  return out;
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
  if (adopt) {
    RESHARD_RETURN_NOT_OK(source_.Rebind(user.sources));
    out.sources = source_.bindings();
  } else {
    RESHARD_ASSIGN_OR_RETURN(out.sources, source_.Translate(user.sources));
  }
  for (const auto& b : user.targets) {
    RESHARD_ASSIGN_OR_RETURN(auto wire, TranslateTarget(b, adopt));
    out.targets.push_back(std::move(wire));
  }
  if (adopt) bindings_ = out;
  return out;
}

Result<WeightRuntimeBindingManifest> LiveConversion::TranslateTarget(
    const WeightRuntimeBindingManifest& user, bool adopt) {
  if (target_plan_.empty()) return user;
  const std::string& p = user.participant_id();
  const WeightPlacementManifest& staging = target_plan_.staging();
  std::vector<RuntimeBindingFragment> fragments;
  // Staging fragments bound so far: fragments of one dequantized weight
  // may share one staging scale fragment (ConversionPlan::StagingScaleOf).
  std::unordered_set<std::string> bound;
  for (const RuntimeBindingFragment& u : user.fragments()) {
    const PlacementFragment* f =
        target_plan_.target().FindFragment(u.placement_fragment_id());
    const std::string& staged =
        target_plan_.StagingFragmentOf(u.placement_fragment_id());
    const TensorConversion* c =
        f == nullptr ? nullptr : target_plan_.Find(f->tensor_id());
    if (c == nullptr && !staged.empty()) {
      RuntimeBindingFragmentSpec spec = internal::SpecOf(u);
      spec.placement_fragment_id = staged;
      RESHARD_ASSIGN_OR_RETURN(auto made,
                               RuntimeBindingFragment::Make(std::move(spec)));
      fragments.push_back(std::move(made));
      continue;
    }
    if (f == nullptr) return user;  // not of the target: the session names it
    RESHARD_RETURN_NOT_OK(internal::RequireContiguousHost(
        u, "a converting live session", "target", p));
    if (adopt) {
      user_targets_[u.placement_fragment_id()] =
          reinterpret_cast<void*>(u.address());
    }
    if (staged.empty()) continue;  // scales the target's quantization writes
    for (const std::string* id :
         {&staged, &target_plan_.StagingScaleOf(staged)}) {
      if (id->empty() || !bound.insert(*id).second) continue;
      const PlacementFragment* s = staging.FindFragment(*id);
      const int64_t itemsize = staging.FindTensor(s->tensor_id())->itemsize();
      RESHARD_ASSIGN_OR_RETURN(void* buffer, Buffer(*id, s->nbytes()));
      staged_targets_[*id] = buffer;
      RESHARD_ASSIGN_OR_RETURN(
          auto made, internal::OwnedBindingFragment(*s, itemsize, buffer, u));
      fragments.push_back(std::move(made));
    }
  }
  return internal::RebuiltBinding(user, staging, std::move(fragments));
}

Status LiveConversion::Apply(uint32_t threads) const {
  if (target_plan_.empty() || user_targets_.empty()) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = internal::ApplyConversions(
      target_plan_, internal::FragmentMemoryIn(staged_targets_),
      internal::FragmentMemoryIn(user_targets_), threads);
  apply_seconds_ =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
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
  RESHARD_ASSIGN_OR_RETURN(
      wire->conversion,
      LiveConversion::Make(wire->source, wire->target, bindings, c));
  LiveConversion* conversion = wire->conversion.get();
  wire->bindings = conversion->bindings();
  LiveSessionOptions& o = wire->options;
  if (o.current_bindings) {
    o.current_bindings =
        [conversion,
         user = std::move(o.current_bindings)]() -> Result<LiveBindings> {
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
