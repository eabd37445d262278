// The entry point: bind caller memory to a placement, then reshard it.
//
// A framework describes each layout as a placement (placement.h) and owns
// the memory of the fragments its process holds. Two calls move weights
// from one layout to the other:
//
//   auto src = reshard::BindBuffers(source, "trainer-0", source_buffer_of);
//   auto dst = reshard::BindBuffers(target, "rollout-0", target_buffer_of);
//   auto report = reshard::Reshard(source, {*src}, target, {*dst}, transport);
//
// BindBuffers turns "placement fragment id -> pointer" into a validated
// runtime binding (binding.h), so nobody fills binding specs by hand;
// BindCheckedBuffers and BindAllBuffers return it as CheckedBindings,
// which Reshard does not check again.
// Reshard checks both sides' bindings, plans (plan.h), binds the plan to
// absolute addresses (bound_plan.h), fences the generation and lease right
// before execution, submits to a Transport (transport.h) and waits. Nothing
// is written to a target before every check has passed.

#ifndef RESHARD_API_H_
#define RESHARD_API_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "reshard/binding.h"
#include "reshard/conversion.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "reshard/sdk/transport.h"
#include "reshard/status.h"

namespace reshard {

// ---------------------------------------------------------------------------
// Binding caller memory.

// Where the bytes of one placement fragment live: a pointer to the
// fragment's `nbytes` bytes, contiguous and row-major in its local shape.
// Returning nullptr means the caller has no buffer for it (an error).
using FragmentBufferLookup =
    std::function<void*(std::string_view placement_fragment_id)>;

// What BindBuffers writes into the binding besides the addresses. The
// defaults describe host memory of one process.
struct BufferBindingOptions {
  // The process (address space) holding the memory. Runtime fragment ids
  // are "<instance_id>:<placement_fragment_id>".
  std::string instance_id = "local";
  // The runtime's weight generation and lease: the fence compares them
  // right before execution (rules 57-60).
  uint64_t generation = 1;
  std::string lease_id = "local-lease";
  // The worker whose memory this is; (instance_id, worker_id, device) is
  // one address space, so two buffers of one worker must not overlap
  // unless they are an exact declared alias.
  std::string worker_id = "local";
  // Routing only, never an address space.
  std::string endpoint = "local";
  // "cpu" (host memory), "cuda" or "cuda:<ordinal>".
  std::string device = "cpu";
  // Kept alive by every bound fragment (for example the framework's
  // allocation); may be empty.
  std::shared_ptr<void> owner;
};

// Binds every fragment of `participant_id` in `placement` to the memory
// `buffer_of` returns for its placement fragment id. Each fragment is one
// contiguous row-major view in an allocation of its own size. Aliased
// fragments (tied weights declaring one alias group) may share one buffer.
// The result is validated against the placement (rules 30-36).
//
// Errors (InvalidArgument) start "cannot bind buffers of participant <p>: "
// and name the fragment at fault: an unknown participant, a participant
// without fragments, a null or missing buffer, address arithmetic that
// does not fit in 64 bits, buffers that overlap without being declared
// aliases, an empty id in the options.
Result<WeightRuntimeBindingManifest> BindBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const FragmentBufferLookup& buffer_of,
    const BufferBindingOptions& options = {});

// The same from a map of placement fragment id to buffer; a fragment
// missing from the map is an error naming it.
Result<WeightRuntimeBindingManifest> BindBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::map<std::string, void*>& buffers,
    const BufferBindingOptions& options = {});
Result<WeightRuntimeBindingManifest> BindBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::unordered_map<std::string, void*>& buffers,
    const BufferBindingOptions& options = {});

// BindBuffers' binding as checked bindings of one participant (coverage
// kSubset), with the same errors. Reshard, WeightStore and LoadCheckpoint
// take checked bindings without checking them again, so a binding made
// here is checked once per operation; several participants' are one set
// through CheckedBindings::Merge.
Result<CheckedBindings> BindCheckedBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const FragmentBufferLookup& buffer_of,
    const BufferBindingOptions& options = {});
Result<CheckedBindings> BindCheckedBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::map<std::string, void*>& buffers,
    const BufferBindingOptions& options = {});

// BindBuffers' binding before its check against the placement (rules
// 30-36); the errors BindBuffers reports while building it (an unknown
// participant, a null or missing buffer, ...) are the same. For a
// consumer that checks plain bindings itself, as every one that takes them
// does, so that each binding is checked once, there: LiveSession::Update
// checks only the bindings that moved.
Result<WeightRuntimeBindingManifest> DescribeBuffers(
    const WeightPlacementManifest& placement, std::string_view participant_id,
    const std::map<std::string, void*>& buffers,
    const BufferBindingOptions& options = {});

// One binding per participant of `placement` that owns fragments, in
// participant order: a process that holds a whole layout (a test, a
// single-host tool). Every binding gets the same options, so all buffers
// are in one address space and those of different participants must not
// overlap either (except exact declared aliases). Checked as one set with
// coverage kEveryOwner (`bindings()` lists them); each binding is checked
// once.
Result<CheckedBindings> BindAllBuffers(
    const WeightPlacementManifest& placement,
    const FragmentBufferLookup& buffer_of,
    const BufferBindingOptions& options = {});

// ---------------------------------------------------------------------------
// Resharding.

// The runtime bindings of both sides as they are now.
struct CurrentBindings {
  std::vector<WeightRuntimeBindingManifest> sources;
  std::vector<WeightRuntimeBindingManifest> targets;
};

struct ReshardOptions {
  // Planning limits and scope; unused by the overload that takes a plan.
  PlanOptions plan;
  // Which participants must be bound before Reshard moves a byte:
  // kEveryOwner, every participant of both placements that owns fragments
  // (a missing binding is an error naming the side and participant, before
  // binding); kSubset, only the fragments the plan reads or writes (for
  // example a plan for one target participant,
  // PlanOptions::target_participant_id).
  BindingCoverage coverage = BindingCoverage::kEveryOwner;
  // The fence: called right before submission; the bound plan must still
  // match what it returns (instance, generation, lease, every used view),
  // else FailedPrecondition and nothing moves. When empty, the bindings
  // passed to Reshard are taken as current.
  std::function<Result<CurrentBindings>()> current_bindings;
  // Worker threads of the LocalTransport the convenience overload builds.
  uint32_t threads = 1;
};

struct ReshardReport {
  uint64_t bytes = 0;           // bytes written to targets
  uint64_t regions = 0;         // overlap regions of the plan
  uint64_t operations = 0;      // strided operations submitted
  uint64_t segments = 0;        // contiguous runs under row-by-row geometry
  double plan_seconds = 0;      // 0 when the caller passed a plan
  double bind_seconds = 0;      // binding checks and absolute addresses
  double transfer_seconds = 0;  // fence, submission and the wait
};

// Every field of `r`, names sorted (reshard/fields.h): Python's reshard()
// report is written from it.
template <typename Visit>
void VisitFields(const ReshardReport& r, Visit&& visit) {
  visit("bind_seconds", r.bind_seconds);
  visit("bytes", r.bytes);
  visit("operations", r.operations);
  visit("plan_seconds", r.plan_seconds);
  visit("regions", r.regions);
  visit("segments", r.segments);
  visit("transfer_seconds", r.transfer_seconds);
}

// Plans `target` from `source`, then reshards with that plan (below).
//
// Every Reshard takes plain bindings, checked once here, or
// CheckedBindings (BindAllBuffers, BindCheckedBuffers, CheckedBindings::
// Make), which are not checked again: only that they were checked for
// these placements. Coverage (options.coverage) is checked either way.
Result<ReshardReport> Reshard(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options = {});
Result<ReshardReport> Reshard(const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              Transport& transport,
                              const ReshardOptions& options = {});

// Reshards with a plan made earlier for these two placements
// (LogicalTransferPlan::Make), so that a caller resharding every step
// plans once: the plan is address-free, only binding is repeated. Checks
// the bindings' coverage (options.coverage), binds (BoundTransferPlan::
// Bind: placements match the plan, bindings valid, no in-place reshard),
// fences, submits to `transport` and waits. On an error no target byte has
// been written unless the transport itself failed mid-transfer (then the
// targets' contents are unspecified and nothing is in flight any more).
Result<ReshardReport> Reshard(
    const LogicalTransferPlan& plan, const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    Transport& transport, const ReshardOptions& options = {});
Result<ReshardReport> Reshard(const LogicalTransferPlan& plan,
                              const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              Transport& transport,
                              const ReshardOptions& options = {});

// Plans and reshards in this process: a plan of host memory on a
// LocalTransport of options.threads threads, a plan touching CUDA memory
// on the CUDA executor (backends/cuda_transport.h); where there is none,
// refused before a byte moves in one line naming the first CUDA fragment
// and why.
Result<ReshardReport> Reshard(
    const WeightPlacementManifest& source,
    const std::vector<WeightRuntimeBindingManifest>& source_bindings,
    const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    const ReshardOptions& options = {});
Result<ReshardReport> Reshard(const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              const ReshardOptions& options = {});
// The same with a plan made earlier for these placements.
Result<ReshardReport> Reshard(const LogicalTransferPlan& plan,
                              const WeightPlacementManifest& source,
                              const CheckedBindings& source_bindings,
                              const WeightPlacementManifest& target,
                              const CheckedBindings& target_bindings,
                              const ReshardOptions& options = {});

// ---------------------------------------------------------------------------
// Converting into bound targets from another source (a checkpoint, a store
// revision): the staging half of a converting reshard.

// The staging placement of a conversion (conversion.h) bound for the
// targets of `target_bindings`: each staging fragment of a tensor that
// does not convert is its target fragment's own memory; those of
// converting tensors are host buffers this object owns (the source-dtype
// copy of the converting fragments). Fill `bindings()` (LoadCheckpoint,
// WeightStore::Load, any reshard into `plan.staging()`), then `Apply`
// computes every converting target fragment. The targets must be
// contiguous host memory. Move-only; the plan must outlive it.
class ConversionStaging {
 public:
  static Result<ConversionStaging> Make(
      const ConversionPlan& plan,
      const std::vector<WeightRuntimeBindingManifest>& target_bindings);
  ConversionStaging(ConversionStaging&&) noexcept;
  ConversionStaging& operator=(ConversionStaging&&) noexcept;
  ~ConversionStaging();

  // One binding of plan.staging() per target binding's participant.
  const std::vector<WeightRuntimeBindingManifest>& bindings() const;
  // The same, checked once when bound (coverage kSubset): hand these to
  // LoadCheckpoint, WeightStore::Load or Reshard and they are not checked
  // again.
  const CheckedBindings& checked_bindings() const;
  // Host bytes this object holds for converting fragments.
  uint64_t staging_bytes() const;
  // Converts every converting target fragment on `threads` threads.
  Status Apply(uint32_t threads = 1) const;

 private:
  struct Impl;
  explicit ConversionStaging(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Quantization at the source, before bytes leave it (live sessions, store
// uploads of an FP8 revision): `placement()` is QuantizedSourcePlacement
// (source, target), and `bindings()` bind the participants of
// `source_bindings` in it: the caller's own fragments where nothing
// quantizes, host buffers this object owns (FP8 weights and their float32
// scales) where something does. `Quantize` fills those buffers from the
// caller's current values; call it before each send or upload. The
// caller's fragments of quantizing tensors must be contiguous host memory
// (else InvalidArgument naming the fragment). Move-only.
class SourceQuantization {
 public:
  static Result<SourceQuantization> Make(
      const WeightPlacementManifest& source,
      const WeightPlacementManifest& target,
      const std::vector<WeightRuntimeBindingManifest>& source_bindings,
      const ConversionOptions& options = {});
  SourceQuantization(SourceQuantization&&) noexcept;
  SourceQuantization& operator=(SourceQuantization&&) noexcept;
  ~SourceQuantization();

  // Whether any tensor quantizes (else placement() is the source and
  // bindings() the caller's).
  bool quantizes() const;
  const WeightPlacementManifest& placement() const;
  const std::vector<WeightRuntimeBindingManifest>& bindings() const;
  // `source_bindings` (of participants bound at Make) as bindings of
  // placement(), without adopting their addresses: for comparing
  // generations and leases.
  Result<std::vector<WeightRuntimeBindingManifest>> Translate(
      const std::vector<WeightRuntimeBindingManifest>& source_bindings) const;
  // The caller's buffers moved: Quantize reads these from now on, and
  // bindings() follows them; this object's buffers stay where they are.
  Status Rebind(
      const std::vector<WeightRuntimeBindingManifest>& source_bindings);
  // OK when every tensor `target` (the target of Make) holds in block FP8
  // and the source in float quantizes here; else InvalidArgument naming
  // the first that does not and why (uploads, which have no target side
  // to quantize the rest).
  Status CheckQuantizesAll(const WeightPlacementManifest& target) const;
  // Quantizes every bound fragment on `threads` threads.
  Status Quantize(uint32_t threads = 1) const;
  // Host bytes of this object's buffers; seconds of the last Quantize.
  uint64_t buffer_bytes() const;
  double quantize_seconds() const;

 private:
  struct Impl;
  explicit SourceQuantization(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace reshard

#endif  // RESHARD_API_H_
