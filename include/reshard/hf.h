// Hugging Face checkpoints in and out (docs/hf-checkpoints.md).
//
// A checkpoint is a directory of `.safetensors` files (plus, when sharded,
// `model.safetensors.index.json`) and the model's `config.json`. It is a
// read-only source: HfCheckpoint::Open parses every header strictly, and
// LoadCheckpoint plans any target placement from it and fills the bound
// buffers with the store's ranged, bounded-staging loader, each byte read
// once and straight into place. HfLayout lays a checkpoint's own tensor
// names out on a TP/PP/EP/DP grid with the sharding inference engines use.
// The writer turns any placement, from bound memory, back into a sharded
// checkpoint: the files are laid out first, then every participant writes
// its own byte ranges with positional writes (no rank gathers a tensor).

#ifndef RESHARD_HF_H_
#define RESHARD_HF_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/binding.h"
#include "reshard/conversion.h"
#include "reshard/placement.h"
#include "reshard/status.h"
#include "reshard/stored_manifest.h"
#include "reshard/weight_store.h"

namespace reshard {

// ---------------------------------------------------------------------------
// safetensors files.

// One dtype of the safetensors format and its placement spelling (the
// torch dtype name the rest of reshard uses).
struct SafetensorsDtype {
  std::string_view name;       // "BF16"
  std::string_view placement;  // "bfloat16"
  int64_t itemsize = 0;
};
// BOOL U8 I8 I16 I32 I64 U16 U32 U64 F16 BF16 F32 F64 F8_E4M3 F8_E5M2, or
// nullptr.
const SafetensorsDtype* FindSafetensorsDtype(std::string_view name);
const SafetensorsDtype* FindSafetensorsDtypeByPlacement(
    std::string_view placement_dtype);

// The header's upper bound (the reference reader's): 100,000,000 bytes.
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // the safetensors name ("BF16")
  Dims shape;
  // data_offsets: relative to the first byte after the header.
  uint64_t begin = 0;
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;  // the JSON length n (the data starts at 8 + n)
  uint64_t data_offset = 0;   // 8 + n
  std::vector<SafetensorsTensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

// The header length n from a file's first 8 bytes (little-endian): at most
// kMaxSafetensorsHeaderBytes and 8 + n within `file_size`. Errors name
// `file`.
Result<uint64_t> ParseSafetensorsPrefix(std::string_view file,
                                        std::string_view first8,
                                        uint64_t file_size);

// Parses and checks header JSON `json` (the n bytes after the prefix) of a
// file of `file_size` bytes, as strictly as the reference reader: an
// object of tensors {"dtype", "shape", "data_offsets"} plus an optional
// "__metadata__" of strings; known dtypes; shapes whose byte size fits 64
// bits and equals end - begin; offsets that tile the data exactly (no
// overlap, no hole, nothing past the file or left over); every tensor
// aligned to its item size in the file. Errors name the file and tensor.
Result<SafetensorsHeader> ParseSafetensorsHeader(std::string_view file,
                                                 std::string_view json,
                                                 uint64_t file_size);

// The 8-byte prefix and JSON header of a file holding `tensors` (their
// data_offsets as given), keys sorted, `metadata` as "__metadata__" unless
// empty, padded with spaces so that the data starts at a multiple of 8.
std::string EncodeSafetensorsHeader(
    const std::vector<SafetensorsTensor>& tensors,
    const std::map<std::string, std::string>& metadata);

// ---------------------------------------------------------------------------
// A checkpoint directory as a source.

struct CheckpointTensor {
  std::string name;
  std::string file;   // file name inside the directory
  std::string dtype;  // placement dtype ("bfloat16")
  int64_t itemsize = 0;
  Dims shape;
  uint64_t offset = 0;  // absolute byte offset in the file
  uint64_t nbytes = 0;
};

struct CheckpointFile {
  std::string name;
  uint64_t size = 0;
  uint64_t header_bytes = 0;  // 8 + n
  std::map<std::string, std::string> metadata;
};

class HfCheckpoint {
 public:
  // Opens every `*.safetensors` file of `dir` (or, when
  // model.safetensors.index.json exists, exactly the files its weight_map
  // names, which must then hold exactly its tensors), reads and checks each
  // header, and keeps the files open (read-only) for loads. A tensor in two
  // files, a missing or non-regular file and a malformed header are errors
  // naming the file and tensor. Symbolic links to regular files are
  // followed (the Hugging Face cache links snapshots to blobs).
  static Result<HfCheckpoint> Open(const std::string& dir);

  const std::string& directory() const;
  // Sorted by name.
  const std::vector<CheckpointFile>& files() const;
  // Sorted by name.
  const std::vector<CheckpointTensor>& tensors() const;
  const CheckpointTensor* FindTensor(std::string_view name) const;
  // Bytes of tensor data, and of headers (8-byte prefixes included).
  uint64_t tensor_bytes() const;
  uint64_t header_bytes() const;

  struct State;  // the open files (src/hf/checkpoint.cc)
  const std::shared_ptr<State>& state() const { return state_; }

 private:
  explicit HfCheckpoint(std::shared_ptr<State> s) : state_(std::move(s)) {}
  std::shared_ptr<State> state_;
};

// The checkpoint as a plan source for `target`: one stored fragment per
// target tensor, its object the tensor's file and its range the tensor's
// bytes, under the target's resource, revision and generation (a
// checkpoint has no identity of its own) and with the target's tensor
// descriptors. Every target tensor must be in the checkpoint with the
// target's shape and dtype (errors name tensor and file); checkpoint
// tensors the target lacks are not part of the source.
Result<StoredWeightManifest> CheckpointSource(
    const HfCheckpoint& checkpoint, const WeightPlacementManifest& target);

// The checkpoint's tensors as a conversion source (ConversionPlan::Make):
// dtype and shape from the headers, layout "<dtype>:row-major". The
// lookup keeps the checkpoint open.
SourceTensorLookup CheckpointTensorLookup(const HfCheckpoint& checkpoint);

struct CheckpointLoadOptions {
  uint64_t max_range_bytes = uint64_t{64} << 20;
  uint32_t max_ranges_per_request = 1024;
  uint64_t staging_bytes = uint64_t{64} << 20;
  uint64_t max_read_gap_bytes = uint64_t{64} << 10;
  // Strided rows averaging at least this many bytes are read straight
  // into the target rows (see WeightStoreOptions::min_scatter_bytes).
  uint64_t min_scatter_bytes = uint64_t{4} << 10;
  // Target bytes delivered of the bytes the bindings bind; empty: none.
  ProgressCallback progress;
  // Convert target tensors whose dtype differs from the checkpoint's
  // (docs/conversion.md; quantization blocks of fp8_block), through
  // staging buffers of the converting fragments in the checkpoint's dtype,
  // in groups of whole tensors of at most convert_staging_bytes (see
  // WeightStoreOptions::convert_staging_bytes). Without it the first
  // tensor (by id) whose dtype differs is refused.
  bool convert = false;
  Fp8Block fp8_block;
  uint64_t convert_staging_bytes = uint64_t{256} << 20;
};

// What LoadCheckpoint refuses about the checkpoint and `target` before it
// reads a byte, checked without binding or reading anything: every target
// tensor is in the checkpoint with its shape, and one whose dtype differs
// is refused without `options.convert` (LoadCheckpoint's message, naming
// the first such tensor) and must convert by a rule of docs/conversion.md
// with it (ConversionPlan::Make's refusals). A caller that creates
// outputs checks this first (`reshard engine load`).
Status CheckCheckpointLoad(const HfCheckpoint& checkpoint,
                           const WeightPlacementManifest& target,
                           const CheckpointLoadOptions& options = {});

// Plans the fragments `target_bindings` bind (host memory) from the
// checkpoint and reads them straight into their buffers
// (LoadReport::bytes_read: tensor bytes actually read from the files).
// Plain bindings are checked once here; CheckedBindings are not checked
// again, only that they were checked for `target`.
Result<LoadReport> LoadCheckpoint(
    const HfCheckpoint& checkpoint, const WeightPlacementManifest& target,
    const std::vector<WeightRuntimeBindingManifest>& target_bindings,
    const CheckpointLoadOptions& options = {});
Result<LoadReport> LoadCheckpoint(const HfCheckpoint& checkpoint,
                                  const WeightPlacementManifest& target,
                                  const CheckedBindings& target_bindings,
                                  const CheckpointLoadOptions& options = {});

// ---------------------------------------------------------------------------
// Any placement back to a checkpoint.

struct CheckpointWriteOptions {
  // A new file starts before a tensor that would take the current one
  // past this many data bytes (a tensor larger than it gets a file alone).
  uint64_t max_file_bytes = 5'000'000'000;
  std::map<std::string, std::string> metadata = {{"format", "pt"}};
  // Gather window of strided writes.
  uint64_t staging_bytes = uint64_t{64} << 20;
  // Tensor bytes written of those this call writes (WriteCheckpointFragments:
  // the bindings' share; ExportCheckpoint: the whole revision); empty: none.
  ProgressCallback progress;
};

struct CheckpointWriteFile {
  std::string name;  // model-0000k-of-0000n.safetensors
  uint64_t size = 0;
  std::string header;  // prefix + JSON, padded to a multiple of 8
};

struct CheckpointWriteTensor {
  std::string name;
  size_t file = 0;      // index into files()
  uint64_t offset = 0;  // absolute byte offset in the file
  uint64_t nbytes = 0;
};

// Where every tensor of a placement goes: deterministic from the
// placement, so every writing process computes the same plan.
class CheckpointWritePlan {
 public:
  const std::vector<CheckpointWriteFile>& files() const;
  // Sorted by name.
  const std::vector<CheckpointWriteTensor>& tensors() const;
  // model.safetensors.index.json.
  const std::string& index_json() const;
  uint64_t tensor_bytes() const;

  struct State;  // src/hf/write_plan_state.h
  // Made by PlanCheckpointWrite (and the store export).
  explicit CheckpointWritePlan(std::shared_ptr<const State> s)
      : state_(std::move(s)) {}
  const std::shared_ptr<const State>& state() const { return state_; }

 private:
  std::shared_ptr<const State> state_;
};

// Lays the placement's tensors out in files: natural name order (layer 2
// before layer 10), within a file by item size then name so every tensor
// is aligned; and plans which participant writes which bytes (every byte
// of the checkpoint exactly once, replicas balanced by the planner).
Result<CheckpointWritePlan> PlanCheckpointWrite(
    const WeightPlacementManifest& placement,
    const CheckpointWriteOptions& options = {});

// Once, by one process: creates `dir` if missing (its parent must exist)
// and every file as "<name>.partial" at its full size with its header
// written. Refuses (AlreadyExists, nothing changed) if any file of the
// plan, its partial file or the index exists there.
Status CreateCheckpointFiles(const CheckpointWritePlan& plan,
                             const std::string& dir);

struct CheckpointWriteReport {
  uint64_t bytes = 0;   // tensor bytes written
  uint64_t writes = 0;  // positional write calls
};

// Calls visit(name, value) for every field of `r`, names sorted: the one
// statement of the report's fields (the CLI's --json, Python's dicts).
template <typename Visit>
void VisitFields(const CheckpointWriteReport& r, Visit&& visit) {
  visit("bytes", r.bytes);
  visit("writes", r.writes);
}

// Writes every byte the plan assigns to the participants of `bindings`
// (host memory) into the partial files with positional writes; strided
// fragments go through a gather window of staging_bytes. Participants may
// write from any number of processes at once.
// Plain bindings are checked once here; CheckedBindings are not checked
// again.
Result<CheckpointWriteReport> WriteCheckpointFragments(
    const CheckpointWritePlan& plan, const WeightPlacementManifest& placement,
    const std::vector<WeightRuntimeBindingManifest>& bindings,
    const std::string& dir, const CheckpointWriteOptions& options = {});
Result<CheckpointWriteReport> WriteCheckpointFragments(
    const CheckpointWritePlan& plan, const WeightPlacementManifest& placement,
    const CheckedBindings& bindings, const std::string& dir,
    const CheckpointWriteOptions& options = {});

// Once, after every participant wrote: makes the files durable, gives them
// their final names and writes model.safetensors.index.json last, so a
// directory with an index holds a complete checkpoint.
Status FinishCheckpoint(const CheckpointWritePlan& plan,
                        const std::string& dir);

// ---------------------------------------------------------------------------
// Checkpoints and weight-store revisions.

struct HfImportOptions {
  std::string resource_id;  // default: the config's model_type
  std::string revision = "hf";
  uint64_t weight_generation = 0;
  // Tensors are stored in row-major slabs of at most this many bytes: the
  // import's memory.
  uint64_t max_fragment_bytes = uint64_t{64} << 20;
  // Checkpoint bytes imported (read, checksummed and written) of the
  // whole; empty: none.
  ProgressCallback progress;
};

struct HfImportReport {
  std::string manifest_key;
  uint64_t tensors = 0;
  uint64_t fragments = 0;
  uint64_t bytes_read = 0;
  uint64_t side_files = 0;  // side files stored with the revision
};

// Every field of `r`, names sorted (see VisitFields above).
template <typename Visit>
void VisitFields(const HfImportReport& r, Visit&& visit) {
  visit("bytes_read", r.bytes_read);
  visit("fragments", r.fragments);
  visit("manifest_key", r.manifest_key);
  visit("side_files", r.side_files);
  visit("tensors", r.tensors);
}

// Makes a committed, checksummed revision of the checkpoint, its tensors
// described by HfLayout(config_json, TP1) (layer and expert ids, dtypes
// from the checkpoint), each tensor stored as slabs read from its file one
// at a time (WeightStore::PrepareImport / Import / Commit; aborted on
// error). The side files of the checkpoint's directory (ReadHfSideFiles,
// refused before anything is written) are stored with the revision as
// checksummed revision files (docs/store-format.md, "Revision files").
Result<HfImportReport> ImportCheckpoint(const HfCheckpoint& checkpoint,
                                        std::string_view config_json,
                                        WeightStore& store,
                                        const HfImportOptions& options = {});

struct HfExportReport {
  uint64_t bytes = 0;       // tensor bytes written
  uint64_t bytes_read = 0;  // payload bytes read (whole checksum chunks)
  uint64_t chunks_verified = 0;
  uint64_t writes = 0;
  uint64_t files = 0;
  uint64_t side_files = 0;  // 0: the revision holds none
};

// Every field of `r`, names sorted (see VisitFields above).
template <typename Visit>
void VisitFields(const HfExportReport& r, Visit&& visit) {
  visit("bytes", r.bytes);
  visit("bytes_read", r.bytes_read);
  visit("chunks_verified", r.chunks_verified);
  visit("files", r.files);
  visit("side_files", r.side_files);
  visit("writes", r.writes);
}

// Writes a committed revision as a checkpoint in `dir` (as
// CreateCheckpointFiles .. FinishCheckpoint), under a lease: every stored
// fragment is read in verified windows of options.staging_bytes and
// written to its files' positions; no tensor is ever whole in memory. The
// revision's side files are read and verified first and written (as
// WriteHfSideFiles) before the index; one already in `dir` is refused
// (AlreadyExists) before anything is written. A revision stored without
// side files exports its weights alone (side_files 0).
Result<HfExportReport> ExportCheckpoint(
    WeightStore& store, const StoredWeightManifest& manifest,
    const std::string& dir, const CheckpointWriteOptions& options = {});

// ---------------------------------------------------------------------------
// Side files: what a checkpoint directory holds beside its weights for
// from_pretrained (configuration, generation configuration, tokenizer).

struct HfSideFile {
  std::string name;
  std::string bytes;
};

// Whether `name` is a side file: exactly one of config.json,
// generation_config.json, tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, added_tokens.json, chat_template.jinja,
// chat_template.json, tokenizer.model, spiece.model,
// sentencepiece.bpe.model, vocab.json, vocab.txt, merges.txt,
// preprocessor_config.json, processor_config.json, or `<stem>.tiktoken`;
// always of [A-Za-z0-9._-] starting with a letter or digit. Weights, their
// index and code files never are.
bool IsHfSideFileName(std::string_view name);

// The side files at the top of `dir`, by name. A link is followed to a
// regular file (as for the weights); a side file that is not a regular
// file (a FIFO, a device, a directory, a dangling link) is refused naming
// it, without blocking; one over 64 MiB, side files over 256 MiB together
// or more than 64 of them are refused. Other entries are ignored.
Result<std::vector<HfSideFile>> ReadHfSideFiles(const std::string& dir);

// AlreadyExists naming the first of `files` (or its partial file) that is
// in `dir`; OK when `dir` does not exist. What a caller that creates
// outputs checks first.
Status CheckHfSideFilesAbsent(const std::vector<HfSideFile>& files,
                              const std::string& dir);

// Writes `files` into the existing directory `dir`, each as
// "<name>.partial" made durable and then linked to its name (never
// replacing an entry). Refuses (AlreadyExists, nothing written) if any of
// them or its partial file is there, and (InvalidArgument) a name that is
// no side file name; on failure removes what it wrote.
Status WriteHfSideFiles(const std::vector<HfSideFile>& files,
                        const std::string& dir);

// ---------------------------------------------------------------------------
// Layouts from config.json.

struct HfLayoutOptions {
  ParallelSizes sizes;
  std::string resource_id;  // default: the config's model_type
  std::string revision = "hf";
  uint64_t weight_generation = 0;
  // "fp8": the FP8 form of a float model: the linear weights of the FP8
  // schemes (docs/conversion.md) in float8_e4m3fn, each followed by its
  // float32 `<prefix>.weight_scale_inv` for `block`; everything else
  // unchanged. Empty: the checkpoint's (or config's) own form.
  std::string quantize;
  Fp8Block block;
  // "float32", "bfloat16" or "float16": every float tensor in that dtype
  // (FP8 ones included) and no scale tensors. Excludes `quantize`.
  std::string dtype;
};

// Lays the model's tensors (the checkpoint's own names) out on the grid
// with the sharding inference engines use (docs/hf-checkpoints.md):
// column-parallel projections split dim 0 over TP, row-parallel ones dim
// 1, embedding and LM head vocab-parallel, norms and routers replicated,
// K/V projections replicated when TP exceeds the KV heads, routed experts
// owned by EP ranks (split like dense MLPs over TP when EP is 1), layers
// in contiguous blocks per PP stage (embedding first, final norm, head
// and multi-token-prediction layers last), FP8 block scales following
// their weight. With `checkpoint`, dtypes and shapes come from it, and a
// tensor the architecture does not name, or a named one it lacks, is an
// error. Architectures: LlamaForCausalLM, Qwen2ForCausalLM,
// Qwen3ForCausalLM, Qwen3MoeForCausalLM, MixtralForCausalLM,
// DeepseekV3ForCausalLM.
Result<WeightPlacementManifest> HfLayout(
    std::string_view config_json, const HfLayoutOptions& options,
    const HfCheckpoint* checkpoint = nullptr);

}  // namespace reshard

#endif  // RESHARD_HF_H_
