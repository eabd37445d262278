// Engine layouts: the parameters trainers and inference engines really
// hold (fused, interleaved, padded), as maps onto a placement of the
// model's canonical (Hugging Face) tensors (docs/engines.md).
//
// An EngineLayout is a placement plus, for every participant, its
// parameters in engine order: name, shape, dtype and the ordered pieces
// that fill the parameter's bytes, each a placement fragment (one
// contiguous row-major box of a canonical tensor) at a byte offset, or
// padding. Pieces tile each parameter exactly. Binding a participant's
// parameter buffers by name yields its runtime binding (each fragment at
// its address inside its parameter), so the planner, the live sessions
// and the store move bytes straight into and out of engine parameters.
// Padding is never sent and is zero-filled on load; a fill piece (padding
// with a `fill`) holds one element's bytes repeated, a constant the engine
// allocates with (vLLM's KV-cache scales, -1.0), never sent either.
//
//   auto layout = reshard::MakeEngineLayout(config_json, {.engine = "vllm",
//                                           .sizes = {.tp = 4}});
//   auto binding = reshard::BindParameters(*layout, "p-d0-p0-e0-t0", bufs);

#ifndef RESHARD_ENGINE_H_
#define RESHARD_ENGINE_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/api.h"
#include "reshard/binding.h"
#include "reshard/hf.h"
#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard {

// One run of a parameter's bytes.
struct ParameterPiece {
  uint64_t offset = 0;  // byte offset inside the parameter
  uint64_t nbytes = 0;
  // The placement fragment whose bytes these are; empty for padding.
  std::string placement_fragment_id;
  // Padding only: the bytes of one element of the parameter's dtype (as
  // they lie in memory), repeated over the piece: a constant the engine
  // holds there (vLLM's KV-cache scales hold -1.0), written wherever
  // padding is written and never moved between sides. Empty: zeros.
  std::string fill;
  bool padding() const { return placement_fragment_id.empty(); }
  friend bool operator==(const ParameterPiece&,
                         const ParameterPiece&) = default;
};

struct EngineParameter {
  std::string name;
  Dims shape;
  std::string dtype;  // placement dtype ("bfloat16")
  int64_t itemsize = 0;
  std::vector<ParameterPiece> pieces;  // by offset, tiling the parameter
  // product(shape) * itemsize.
  uint64_t nbytes() const;
  friend bool operator==(const EngineParameter&,
                         const EngineParameter&) = default;
};

struct EngineParticipant {
  std::string participant_id;
  std::vector<EngineParameter> parameters;  // engine order
};

// An immutable, validated engine layout. Copies are cheap.
class EngineLayout {
 public:
  // Checks every participant's map against the placement: a known
  // participant, once; unique parameter names with a known dtype and a
  // shape of non-negative dimensions (a dimension of 0 makes a zero-size
  // parameter, which has no pieces; an empty shape a 0-dim scalar);
  // pieces that tile each parameter exactly (no gap, no
  // overlap, nothing past its end) of the participant's own fragments or
  // padding, each fragment's bytes in a parameter of its dtype, every
  // fragment of the participant in exactly one piece; a fill only on
  // padding, exactly one element of the parameter's itemsize. Errors
  // (InvalidArgument) name the participant and parameter.
  static Result<EngineLayout> Make(std::string engine,
                                   WeightPlacementManifest placement,
                                   std::vector<EngineParticipant> participants);

  const std::string& engine() const;
  const WeightPlacementManifest& placement() const;
  // Sorted by participant id; one per topology participant.
  const std::vector<EngineParticipant>& participants() const;
  const EngineParticipant* FindParticipant(std::string_view id) const;

 private:
  struct Impl;
  explicit EngineLayout(std::shared_ptr<const Impl> impl)
      : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
};

// The presets (docs/engines.md): "hf" (the canonical tensors as HfLayout
// lays them out), "megatron" (Megatron-Core GPTModel, Transformer Engine
// layer spec), "vllm", and "sglang" (vLLM's layout).
std::vector<std::string_view> EngineNames();

struct EngineLayoutOptions {
  std::string engine = "vllm";
  // tp, pp, dp: the engine's grid. ep: vLLM's expert parallelism, 1 or
  // tp * dp (the rank d * tp + t holds the experts of EP rank d * tp + t);
  // Megatron's expert-parallel size, dividing tp * dp (rank (d * tp + t)
  // % ep), experts whole (expert tensor parallel 1).
  ParallelSizes sizes;
  std::string resource_id;  // default: the config's model_type
  std::string revision = "hf";
  uint64_t weight_generation = 0;
  // Megatron pads the vocabulary to a multiple of this times TP
  // (--make-vocab-size-divisible-by).
  int64_t make_vocab_size_divisible_by = 128;
  // The form of the canonical tensors, as HfLayoutOptions: "fp8" (the
  // linear weights block-quantized, with their scales; vLLM then holds
  // FP8 parameters and their weight_scale_inv), or a float `dtype` (no
  // scales). Megatron holds unquantized weights only.
  std::string quantize;
  Fp8Block block;
  std::string dtype;
  // vLLM's sequence-parallel MoE (the vllm and sglang presets), under which
  // vLLM builds the shared experts (DeepSeek's shared_experts, Qwen3-Next's
  // and Qwen3.5's shared_expert) whole on every rank (disable_tp) instead
  // of TP-split. kAuto follows vLLM's rule under its default all2all
  // backend (allgather_reducescatter): on with expert parallelism, TP > 1
  // and DP > 1. kOn is the same rule, but a grid where vLLM cannot run it
  // (EP 1, TP 1 or DP 1) is refused; kOff models an all2all backend outside
  // vLLM's sequence-parallel list (naive, pplx, moonep,
  // flashinfer_nvlink_two_sided): shared experts TP-split at every grid.
  // Other presets refuse anything but kAuto.
  enum class SequenceParallelMoe { kAuto, kOn, kOff };
  SequenceParallelMoe sequence_parallel_moe = SequenceParallelMoe::kAuto;
};

// "auto", "on", "off" (--sequence-parallel-moe, Python
// sequence_parallel_moe=); InvalidArgument listing them otherwise.
Result<EngineLayoutOptions::SequenceParallelMoe> ParseSequenceParallelMoe(
    std::string_view text);

// The layout of the model `config_json` describes for an engine preset.
// With `checkpoint`, the canonical tensors' dtypes and shapes come from it
// (FP8 weights and their scales included); without, from the config. A
// grid the engine refuses (vLLM block-FP8 shards not aligned to the
// block, Megatron query groups not divisible by TP, a vocabulary some rank
// would hold none of) is InvalidArgument naming the parameter or tensor.
Result<EngineLayout> MakeEngineLayout(std::string_view config_json,
                                      const EngineLayoutOptions& options,
                                      const HfCheckpoint* checkpoint = nullptr);

// A parameter's memory: `nbytes` bytes at `data`, contiguous.
struct ParameterBuffer {
  void* data = nullptr;
  uint64_t nbytes = 0;
};
using ParameterBuffers = std::map<std::string, ParameterBuffer, std::less<>>;

// Every fragment of the participant's parameters at its address inside
// the buffer of its parameter. Every parameter of the map must be given,
// with exactly its size; a buffer of a name the participant does not hold
// is an error naming it.
Result<std::map<std::string, void*>> ParameterFragmentBuffers(
    const EngineLayout& layout, std::string_view participant_id,
    const ParameterBuffers& buffers);

// ParameterFragmentBuffers, then BindCheckedBuffers: the participant's
// runtime binding of `layout.placement()`, checked once, as consumers
// take it without checking it again.
Result<CheckedBindings> BindCheckedParameters(
    const EngineLayout& layout, std::string_view participant_id,
    const ParameterBuffers& buffers, const BufferBindingOptions& options = {});

// The same binding, plain (checked, though a consumer given it plain
// checks it again).
Result<WeightRuntimeBindingManifest> BindParameters(
    const EngineLayout& layout, std::string_view participant_id,
    const ParameterBuffers& buffers, const BufferBindingOptions& options = {});

// Writes every padding piece of the participant's parameters (host
// memory): zeros, or a fill piece's element repeated; what engines hold
// there after loading.
Status ZeroParameterPadding(const EngineLayout& layout,
                            std::string_view participant_id,
                            const ParameterBuffers& buffers);

// Host memory for every parameter of one participant (64-byte aligned;
// 2 MiB-aligned with transparent huge pages when large): its padding
// written (zeros, fills), the rest uninitialized, to be filled by a load,
// a reshard or a file read. Move-only, freed with it.
// Whose a parameter file is: written into its safetensors "__metadata__"
// (keys "reshard.participant_id", "reshard.placement_id",
// "reshard.parameter_map_id", "reshard.revision" and
// "reshard.weight_generation") by WriteParameterFile, and checked by
// ReadParameterFile and ParameterMemory::MapFile, so that a file put in
// another participant's place, or one of another layout, model or
// parameter map whose shapes happen to agree, is refused rather than read.
struct ParameterFileIdentity {
  std::string participant_id;
  std::string placement_id;      // the engine layout's placement
  std::string parameter_map_id;  // EngineParameterMapId of the layout
  std::string revision;          // the placement's revision
  uint64_t weight_generation = 0;
  // "participant P, placement L (revision R, weight generation G),
  // parameter map M" ("none" for an empty id).
  std::string ToString() const;
  friend bool operator==(const ParameterFileIdentity&,
                         const ParameterFileIdentity&) = default;
};

// "sha256:" + SHA-256 of the canonical JSON of the layout's parameter maps
// (EngineParametersToJson less its placement id): names the engine and
// every participant's parameters, shapes, dtypes and pieces, whatever the
// placement's revision. Linear in the maps' size: compute once per layout.
std::string EngineParameterMapId(const EngineLayout& layout);

// The identity of `participant_id`'s file in `layout` whose parameter
// maps are named `parameter_map_id` (EngineParameterMapId(layout)).
ParameterFileIdentity ParameterFileIdentityOf(const EngineLayout& layout,
                                              std::string_view participant_id,
                                              std::string parameter_map_id);

// What a parameter file read for a participant must say of itself.
struct ParameterFileExpectation {
  // The file's participant and parameter map must be these; its placement
  // id this one when written at this revision and weight generation.
  ParameterFileIdentity identity;
  // The slot's placement id at another revision and weight generation (a
  // file written by a load of revision "hf" fills the slot of the same
  // layout at revision "step-7"); unset: a file of another revision is
  // refused.
  std::function<Result<std::string>(const std::string& revision,
                                    uint64_t weight_generation)>
      placement_id_at;
  // Take a file that carries no identity at all (none of the keys; written
  // by another tool, or before files carried one) by its name. A file
  // whose identity differs is refused either way.
  bool trust_file_names = false;
};

// The expectation of `participant_id`'s file in `layout`, at any revision
// of its placement (placement_id_at derives and remembers each revision's
// id; copies share what it remembers, unsynchronized: one thread).
ParameterFileExpectation ExpectParameterFile(const EngineLayout& layout,
                                             std::string_view participant_id,
                                             std::string parameter_map_id);

class ParameterMemory {
 public:
  static Result<ParameterMemory> Allocate(const EngineParticipant& p);
  // The participant's parameters as they lie in its parameter file
  // (WriteParameterFile's form), checked as ReadParameterFile checks them,
  // without reading them: the file (a regular file; anything else is
  // refused without blocking) is mapped privately (its pages come from the
  // page cache, no fresh memory is filled; a write through the buffers
  // changes a private copy of its page, never the file). The file must not
  // shrink while mapped (a read past its end raises SIGBUS).
  static Result<ParameterMemory> MapFile(
      const std::string& path, const EngineParticipant& p,
      const ParameterFileExpectation& expect);
  const ParameterBuffers& buffers() const { return buffers_; }
  uint64_t bytes() const { return bytes_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::vector<std::unique_ptr<uint8_t, Free>> blocks_;
  std::shared_ptr<void> mapping_;  // MapFile's (unmapped when released)
  ParameterBuffers buffers_;
  uint64_t bytes_ = 0;
};

// One participant's parameters as one safetensors file (engine names and
// shapes, in engine order, metadata {"format": "pt"} and `identity`, whose
// participant must be `participant`'s): written as "<path>.partial",
// synced and linked to `path` (never replacing). An existing `path` is
// AlreadyExists (nothing written).
Status WriteParameterFile(const std::string& path,
                          const EngineParticipant& participant,
                          const ParameterBuffers& buffers,
                          const ParameterFileIdentity& identity);
// Reads such a file into `buffers`. It must be a regular file (opened
// without blocking: a FIFO is refused at once), carry `expect.identity`
// (InvalidArgument naming the file and both identities), or no identity
// with `expect.trust_file_names` (otherwise FailedPrecondition), and hold
// exactly the participant's parameters, each with the map's shape and
// dtype (errors name the file and parameter).
Status ReadParameterFile(const std::string& path,
                         const EngineParticipant& participant,
                         const ParameterBuffers& buffers,
                         const ParameterFileExpectation& expect);

// The parameter maps as canonical JSON: {"engine", "placement_id",
// "participants": [{"participant_id", "parameters": [{"name", "shape",
// "dtype", "pieces": [{"offset", "nbytes", "fragment"[, "fill"]}]}]}]},
// "fragment" null for padding; "fill" (a fill piece's element, lowercase
// hex of its bytes in memory order: bfloat16 -1.0 is "80bf") only where
// non-empty, so maps without fills keep their JSON and ids.
std::string EngineParametersToJson(const EngineLayout& layout);
// The inverse, checked against `placement` by EngineLayout::Make.
Result<EngineLayout> EngineParametersFromJson(
    std::string_view json, const WeightPlacementManifest& placement);

// ---------------------------------------------------------------------------
// Parameter-map fingerprints (docs/engines.md). Whoever holds engine
// parameters declares the maps it built for them (engine and release, and
// per parameter its name, shape, dtype and the id of its pieces); a side
// that built the map of those parameters itself (a trainer writing into an
// engine, a load into engine parameters) checks it against the
// declaration before any byte moves, so that a map of one engine release
// never fills the parameters of another.

struct DeclaredParameter {
  std::string name;
  Dims shape;
  std::string dtype;
  std::string pieces_id;  // "sha256:" + SHA-256 of the pieces' canonical JSON
  friend bool operator==(const DeclaredParameter&,
                         const DeclaredParameter&) = default;
};

struct DeclaredParticipantMap {
  std::string participant_id;
  // "sha256:" + SHA-256 of the canonical JSON of {engine, participant_id,
  // parameters} (the engine spec names its release: "vllm@0.33").
  std::string parameter_map_id;
  std::vector<DeclaredParameter> parameters;  // engine order
};

struct DeclaredParameterMaps {
  std::string engine;  // EngineLayout::engine() of the declaring side
  std::vector<DeclaredParticipantMap> participants;
};

// The parameter_map_id of `map` (its own field ignored) under `engine`.
std::string DeclaredParameterMapId(std::string_view engine,
                                   const DeclaredParticipantMap& map);
DeclaredParticipantMap DeclareParticipantMap(const EngineLayout& layout,
                                             const EngineParticipant& p);
// The declaration of `participants` of `layout` (every participant when
// empty); an id the layout lacks is InvalidArgument naming it.
Result<DeclaredParameterMaps> DeclareParameterMaps(
    const EngineLayout& layout,
    const std::vector<std::string>& participants = {});
// Canonical JSON: {"engine", "participants": [{"parameter_map_id",
// "parameters": [{"dtype", "name", "pieces", "shape"}], "participant_id"}]}.
std::string DeclaredParameterMapsToJson(const DeclaredParameterMaps& maps);
// The inverse, strict (exact field sets, each participant once, bounded
// counts); a participant whose parameter_map_id is not the hash of its
// declared parameters is refused.
Result<DeclaredParameterMaps> DeclaredParameterMapsFromJson(
    std::string_view json);
// Every participant `declared` names must be one of `expected`'s, with the
// same parameter map id. Otherwise FailedPrecondition naming the
// participant, both engines and ids, and the first differing parameter
// (index, name, shape and dtype on each side; or its pieces). `who` names
// the declaring side in the message ("the target", "rank 3").
Status CheckDeclaredParameterMaps(const EngineLayout& expected,
                                  const DeclaredParameterMaps& declared,
                                  std::string_view who);

}  // namespace reshard

#endif  // RESHARD_ENGINE_H_
