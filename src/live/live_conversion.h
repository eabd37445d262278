// A live session that converts (LiveSessionOptions::convert): the
// placements that travel and this rank's bindings in them.
//
// Tensors the target holds in block FP8 quantize at the source before the
// wire when every source fragment holds whole blocks (SourceQuantization),
// so FP8 bytes and their scales travel; every
// other conversion (casts, dequantization, quantization of split blocks)
// runs at the target after the bytes arrived (ConversionPlan's staging).
// The session itself moves bytes between the two wire placements as
// usual; this object owns the buffers of the converted fragments on both
// sides (host memory, allocated once at open and reused by every update).

#ifndef RESHARD_LIVE_LIVE_CONVERSION_H_
#define RESHARD_LIVE_LIVE_CONVERSION_H_

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "reshard/api.h"
#include "reshard/conversion.h"
#include "reshard/live.h"
#include "util/host_memory.h"

namespace reshard::live_internal {

class LiveConversion {
 public:
  // The wire placements of `source` -> `target` and this rank's
  // `bindings` in them; a conversion with no rule is refused as by the
  // planner (docs/conversion.md). The converted fragments of this rank's
  // participants must be contiguous host memory, else InvalidArgument
  // naming the fragment.
  static Result<std::unique_ptr<LiveConversion>> Make(
      const WeightPlacementManifest& source,
      const WeightPlacementManifest& target, const LiveBindings& bindings,
      const ConversionOptions& options);

  // What travels: the source with its source-quantized tensors in FP8 and
  // their scales, and the target's staging placement.
  const WeightPlacementManifest& wire_source() const {
    return source_.placement();
  }
  const WeightPlacementManifest& wire_target() const {
    return target_plan_.staging();
  }
  // This rank's bindings of the wire placements, as of Make or the last
  // adopting Translate.
  const LiveBindings& bindings() const { return bindings_; }
  // `user` (this rank's bindings of the caller's placements) as bindings of
  // the wire placements: the caller's own fragments where nothing converts,
  // this object's buffers where something does. When `adopt`, the caller's
  // addresses of converted fragments become those Quantize reads and Apply
  // writes (a rebinding); otherwise `user` only supplies generations and
  // leases (the fence).
  Result<LiveBindings> Translate(const LiveBindings& user, bool adopt);
  // Sources of this rank: quantizes the caller's source fragments into the
  // wire buffers (before each update sends).
  Status Quantize(uint32_t threads) const { return source_.Quantize(threads); }
  // Targets of this rank: converts the received staging fragments into the
  // caller's target fragments (after the bytes arrived).
  Status Apply(uint32_t threads) const;
  // Host bytes of this rank's converted fragments (both sides).
  uint64_t buffer_bytes() const {
    return source_.buffer_bytes() + buffer_bytes_;
  }
  bool quantizes_at_source() const { return source_.quantizes(); }
  // Seconds of the last Quantize and Apply calls.
  double quantize_seconds() const { return source_.quantize_seconds(); }
  double apply_seconds() const { return apply_seconds_; }

 private:
  LiveConversion(SourceQuantization source, ConversionPlan target)
      : source_(std::move(source)), target_plan_(std::move(target)) {}

  Result<WeightRuntimeBindingManifest> TranslateTarget(
      const WeightRuntimeBindingManifest& user, bool adopt);
  // This object's buffer for wire fragment `id` of `bytes` bytes.
  Result<void*> Buffer(const std::string& id, uint64_t bytes);

  SourceQuantization source_;   // source -> wire_source
  ConversionPlan target_plan_;  // wire_source -> target
  LiveBindings bindings_;
  std::unordered_map<std::string, internal::HostBuffer> owned_;
  uint64_t buffer_bytes_ = 0;
  mutable double apply_seconds_ = 0;
  // Apply: the staging buffers (by staging id of target_plan_) and the
  // caller's target fragments (by target id).
  std::unordered_map<std::string, void*> staged_targets_, user_targets_;
};

// What one rank of a session runs on: the caller's placements, bindings
// and options, or, with options.convert, their wire forms, with the
// options' validator and fence wrapped so that they see the caller's
// bindings and converted targets. Owns everything a LiveRank refers to.
struct LiveWire {
  LiveWire(WeightPlacementManifest s, WeightPlacementManifest t,
           LiveSessionOptions o)
      : source(std::move(s)), target(std::move(t)), options(std::move(o)) {}

  WeightPlacementManifest source, target;      // the caller's
  std::unique_ptr<LiveConversion> conversion;  // null without convert
  LiveBindings bindings;                       // this rank's, on the wire
  LiveSessionOptions options;                  // as the LiveRank runs them
  uint32_t threads = 1;                        // for the conversions

  const WeightPlacementManifest& wire_source() const {
    return conversion ? conversion->wire_source() : source;
  }
  const WeightPlacementManifest& wire_target() const {
    return conversion ? conversion->wire_target() : target;
  }
};

// Sets up a rank's wire. With options.convert and shadow_targets off, the
// target conversions run right before options.validate_targets (so before
// the rank votes "done"); with shadow targets the caller runs
// conversion->Apply after the update's flip.
Result<std::unique_ptr<LiveWire>> MakeLiveWire(WeightPlacementManifest source,
                                               WeightPlacementManifest target,
                                               LiveBindings bindings,
                                               LiveSessionOptions options);

}  // namespace reshard::live_internal

#endif  // RESHARD_LIVE_LIVE_CONVERSION_H_
