// SourceQuantization: the source's fragments of tensors that quantize
// (QuantizedSourcePlacement) computed into host buffers before they leave.

#include <chrono>
#include <string>
#include <unordered_map>
#include <utility>

#include "bind/apply_conversion.h"
#include "bind/binding_copy.h"
#include "reshard/api.h"
#include "util/host_memory.h"

namespace reshard {

using internal::OwnedBindingFragment;
using internal::RequireContiguousHost;
using internal::SpecOf;

struct SourceQuantization::Impl {
  ConversionOptions options;
  WeightPlacementManifest placement;
  ConversionPlan plan;  // source -> placement
  std::vector<WeightRuntimeBindingManifest> bindings;
  std::unordered_map<std::string, internal::HostBuffer> owned;
  uint64_t buffer_bytes = 0;
  // Quantize: the caller's fragments (by staging id of `plan`) and this
  // object's buffers (by fragment id of `placement`).
  std::unordered_map<std::string, void*> user, wire;
  mutable double seconds = 0;

  // `user` as a binding of `placement`; with `adopt`, its addresses of
  // quantizing fragments become those Quantize reads.
  Result<WeightRuntimeBindingManifest> Bind(
      const WeightRuntimeBindingManifest& user, bool adopt);
  // This object's buffer of fragment `f` (allocated once).
  Result<void*> Buffer(const PlacementFragment& f);
};

Result<void*> SourceQuantization::Impl::Buffer(const PlacementFragment& f) {
  internal::HostBuffer& b = owned[f.placement_fragment_id()];
  if (b == nullptr) {
    b = internal::AllocateHostBytes(f.nbytes());
    if (b == nullptr) {
      return Status::ResourceExhausted(
          "cannot allocate " + std::to_string(f.nbytes()) +
          " bytes to quantize fragment " + f.placement_fragment_id() + " of " +
          f.tensor_id());
    }
    buffer_bytes += f.nbytes();
  }
  return static_cast<void*>(b.get());
}

Result<WeightRuntimeBindingManifest> SourceQuantization::Impl::Bind(
    const WeightRuntimeBindingManifest& user_binding, bool adopt) {
  if (plan.empty()) return user_binding;
  const std::string& p = user_binding.participant_id();
  const WeightPlacementPart* part = placement.FindPart(p);
  if (part == nullptr) {
    return Status::InvalidArgument("source binding of " + p +
                                   ": not a participant of the source "
                                   "placement");
  }
  std::vector<RuntimeBindingFragment> fragments;
  if (!part->fragments().empty() && user_binding.fragments().empty()) {
    return Status::InvalidArgument("source binding of " + p +
                                   " binds none of its fragments");
  }
  const RuntimeBindingFragment* like = user_binding.fragments().empty()
                                           ? nullptr
                                           : &user_binding.fragments().front();
  for (const PlacementFragment& f : part->fragments()) {
    const std::string& id = f.placement_fragment_id();
    const TensorConversion* c = plan.Find(f.tensor_id());
    const std::string& staged = plan.StagingFragmentOf(id);
    const RuntimeBindingFragment* u =
        staged.empty() ? nullptr : user_binding.FindFragment(staged);
    if (!staged.empty() && u == nullptr) {
      return Status::InvalidArgument("source binding of " + p +
                                     " lacks fragment " + staged + " of " +
                                     f.tensor_id());
    }
    if (c == nullptr && u != nullptr) {
      // Travels as it is: the caller's own memory.
      RuntimeBindingFragmentSpec spec = SpecOf(*u);
      spec.placement_fragment_id = id;
      RESHARD_ASSIGN_OR_RETURN(auto made,
                               RuntimeBindingFragment::Make(std::move(spec)));
      fragments.push_back(std::move(made));
      continue;
    }
    if (c != nullptr) {
      RESHARD_RETURN_NOT_OK(
          RequireContiguousHost(*u, "quantizing", "source", p));
      if (adopt) user[staged] = reinterpret_cast<void*>(u->address());
    }
    // The FP8 weight, or the scales its quantization produces.
    RESHARD_ASSIGN_OR_RETURN(void* buffer, Buffer(f));
    wire[id] = buffer;
    RESHARD_ASSIGN_OR_RETURN(
        auto made,
        OwnedBindingFragment(f, c != nullptr ? 1 : 4, buffer, *like));
    fragments.push_back(std::move(made));
  }
  return internal::RebuiltBinding(user_binding, placement,
                                  std::move(fragments));
}

SourceQuantization::SourceQuantization(std::unique_ptr<Impl> impl)
    : impl_(std::move(impl)) {}
SourceQuantization::SourceQuantization(SourceQuantization&&) noexcept = default;
SourceQuantization& SourceQuantization::operator=(
    SourceQuantization&&) noexcept = default;
SourceQuantization::~SourceQuantization() = default;

Result<SourceQuantization> SourceQuantization::Make(
    const WeightPlacementManifest& source,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const ConversionOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(auto placement,
                           QuantizedSourcePlacement(source, target, options));
  RESHARD_ASSIGN_OR_RETURN(
      auto plan, ConversionPlan::Make(ConversionPlan::LookupIn(source),
                                      placement, options));
  auto impl = std::unique_ptr<Impl>(new Impl{
      options, std::move(placement), std::move(plan), {}, {}, 0, {}, {}, 0});
  SourceQuantization out(std::move(impl));
  RESHARD_RETURN_NOT_OK(out.Rebind(source_bindings));
  return out;
}

bool SourceQuantization::quantizes() const { return !impl_->plan.empty(); }
const WeightPlacementManifest& SourceQuantization::placement() const {
  return impl_->placement;
}
const std::vector<WeightRuntimeBindingManifest>& SourceQuantization::bindings()
    const {
  return impl_->bindings;
}
uint64_t SourceQuantization::buffer_bytes() const {
  return impl_->buffer_bytes;
}
double SourceQuantization::quantize_seconds() const { return impl_->seconds; }

Result<std::vector<WeightRuntimeBindingManifest>> SourceQuantization::Translate(
    const std::vector<WeightRuntimeBindingManifest>& source_bindings) const {
  std::vector<WeightRuntimeBindingManifest> out;
  for (const auto& b : source_bindings) {
    // Not adopting, so only buffers made before are looked up.
    const uint64_t before = impl_->buffer_bytes;
    RESHARD_ASSIGN_OR_RETURN(auto wire, impl_->Bind(b, /*adopt=*/false));
    if (impl_->buffer_bytes != before) {
      return Status::InvalidArgument("source binding of " + b.participant_id() +
                                     ": a participant not bound before");
    }
    out.push_back(std::move(wire));
  }
  return out;
}

Status SourceQuantization::Rebind(
    const std::vector<WeightRuntimeBindingManifest>& source_bindings) {
  std::vector<WeightRuntimeBindingManifest> out;
  for (const auto& b : source_bindings) {
    RESHARD_ASSIGN_OR_RETURN(auto wire, impl_->Bind(b, /*adopt=*/true));
    out.push_back(std::move(wire));
  }
  impl_->bindings = std::move(out);
  return Status::OK();
}

Status SourceQuantization::CheckQuantizesAll(
    const WeightPlacementManifest& target) const {
  RESHARD_ASSIGN_OR_RETURN(
      auto rest, ConversionPlan::Make(ConversionPlan::LookupIn(placement()),
                                      target, impl_->options));
  for (const TensorConversion& c : rest.conversions()) {
    if (c.kind != ConversionKind::kQuantize) continue;
    return Status::InvalidArgument(
        "cannot quantize tensor " + c.tensor_id +
        " at the source: a source fragment of it does not hold whole " +
        std::to_string(c.block.rows) + "x" + std::to_string(c.block.cols) +
        " blocks (or has aliases)");
  }
  return Status::OK();
}

Status SourceQuantization::Quantize(uint32_t threads) const {
  if (impl_->plan.empty() || impl_->user.empty()) return Status::OK();
  const auto t0 = std::chrono::steady_clock::now();
  Status st = internal::ApplyConversions(
      impl_->plan, internal::FragmentMemoryIn(impl_->user),
      internal::FragmentMemoryIn(impl_->wire), std::max<uint32_t>(1, threads));
  impl_->seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0)
          .count();
  return st;
}

}  // namespace reshard
