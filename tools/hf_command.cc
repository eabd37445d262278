// `reshard hf layout|reshard|import|export`: Hugging Face checkpoints.
//
//   reshard hf layout CONFIG.json --tp N --pp N --ep N --dp N
//                     [--checkpoint DIR] -o PLACEMENT.json
//   reshard hf reshard CKPT_DIR TARGET.json OUT_DIR [--json] [--progress M]
//   reshard hf source CKPT_DIR TARGET.json -o MANIFEST.json
//   reshard hf import CKPT_DIR URI [--json] [--progress M]
//   reshard hf export URI MANIFEST_KEY OUT_DIR [--json] [--progress M]

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "reshard/hf.h"
#include "reshard/placement.h"
#include "reshard/weight_store.h"
#include "selftest/host_buffers.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "tools/progress.h"
#include "util/canonical_json.h"

namespace reshard::cli {
namespace {

using Clock = std::chrono::steady_clock;

void AddLayoutCommand(CLI::App* hf) {
  auto* cmd = hf->add_subcommand(
      "layout", "Lay a Hugging Face model's tensors out on a TP/PP/EP/DP grid");
  struct Args {
    std::string config, checkpoint, output;
    HfLayoutOptions options;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("CONFIG", a->config, "the model's config.json")->required();
  AddGridOptions(cmd, &a->options.sizes);
  AddFormOptions(cmd, &a->options.quantize, &a->options.block,
                 &a->options.dtype);
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint directory: its tensors, dtypes and shapes");
  cmd->add_option("--resource-id", a->options.resource_id,
                  "resource id (default: the config's model_type)");
  cmd->add_option("--revision", a->options.revision, "revision");
  cmd->add_option(
      "--generation,--weight-generation", a->options.weight_generation,
      "weight generation (--weight-generation: the library's name)");
  cmd->add_option("-o,--output", a->output, "output file ('-' for stdout)")
      ->required();
  cmd->callback([a]() {
    auto run = [&]() -> Status {
      RESHARD_ASSIGN_OR_RETURN(std::string config,
                               ReadFile(a->config, InputKind::kHfConfig));
      std::optional<HfCheckpoint> ckpt;
      if (!a->checkpoint.empty()) {
        RESHARD_ASSIGN_OR_RETURN(ckpt, HfCheckpoint::Open(a->checkpoint));
      }
      auto placement = HfLayout(config, a->options, ckpt ? &*ckpt : nullptr);
      if (!placement.ok()) return placement.status().WithContext(a->config);
      RESHARD_RETURN_NOT_OK(
          WriteOutput("-o", a->output, WeightPlacementToJson(*placement)));
      std::cerr << "reshard hf layout: " << placement->tensors().size()
                << " tensors, " << placement->fragments().size()
                << " fragments, " << placement->topology().world_size()
                << " participants; placement_id " << placement->placement_id()
                << "\n";
      return Status::OK();
    };
    Status st = run();
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

void AddSourceCommand(CLI::App* hf) {
  auto* cmd = hf->add_subcommand(
      "source",
      "Print the checkpoint as the stored manifest a TARGET load plans from "
      "(each tensor a byte range of its file; `reshard plan` takes it)");
  struct Args {
    std::string checkpoint, target, output;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("CKPT_DIR", a->checkpoint, "checkpoint directory")
      ->required();
  cmd->add_option("TARGET", a->target, "target placement (JSON)")->required();
  cmd->add_option("-o,--output", a->output, "output file ('-' for stdout)")
      ->required();
  cmd->callback([a]() {
    auto run = [&]() -> Status {
      RESHARD_ASSIGN_OR_RETURN(auto ckpt, HfCheckpoint::Open(a->checkpoint));
      RESHARD_ASSIGN_OR_RETURN(auto target, LoadPlacement(a->target));
      RESHARD_ASSIGN_OR_RETURN(auto manifest, CheckpointSource(ckpt, target));
      return WriteOutput("-o", a->output, StoredWeightManifestToJson(manifest));
    };
    Status st = run();
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

struct ReshardArgs {
  std::string checkpoint, target, output;
  bool json = false;
  bool convert = false;
  Fp8Block block;
  ProgressMode progress = ProgressMode::kAuto;
  CheckpointWriteOptions write;
  CheckpointLoadOptions load;
};

// What `hf reshard` did: its load and its write.
struct HfReshardReport {
  LoadReport load;
  CheckpointWriteReport write;
  double load_seconds = 0, write_seconds = 0;
  uint64_t tensors = 0, files = 0, side_files = 0;
  uint64_t header_bytes = 0;
};

// Every field `hf reshard --json` prints, names sorted (reshard/fields.h):
// the load's bytes and reads (LoadReport), the write's bytes (as
// bytes_written) and writes (CheckpointWriteReport), and the command's own.
template <typename Visit>
void VisitFields(const HfReshardReport& r, Visit&& visit) {
  visit("bytes", r.load.bytes);
  visit("bytes_read", r.load.bytes_read);
  visit("bytes_written", r.write.bytes);
  visit("files", r.files);
  visit("header_bytes", r.header_bytes);
  visit("load_seconds", r.load_seconds);
  visit("read_requests", r.load.read_requests);
  visit("regions", r.load.regions);
  visit("side_files", r.side_files);
  visit("tensors", r.tensors);
  visit("write_seconds", r.write_seconds);
  visit("writes", r.write.writes);
}

// Loads every target fragment from the checkpoint into host buffers, then
// writes the output checkpoint from those buffers alone.
Result<HfReshardReport> RunReshard(const ReshardArgs& a) {
  RESHARD_ASSIGN_OR_RETURN(auto ckpt, HfCheckpoint::Open(a.checkpoint));
  RESHARD_ASSIGN_OR_RETURN(auto target, LoadPlacement(a.target));
  // config.json and the other side files go beside the output as they are;
  // read (and refused) before anything is written.
  RESHARD_ASSIGN_OR_RETURN(auto side, ReadHfSideFiles(a.checkpoint));
  RESHARD_ASSIGN_OR_RETURN(auto buffers,
                           internal::AllocateHostBuffers(target, "hf-reshard"));
  HfReshardReport r;
  r.side_files = side.size();
  r.tensors = target.tensors().size();
  r.header_bytes = ckpt.header_bytes();
  auto t0 = Clock::now();
  ProgressLine loading("loading " + a.checkpoint, a.progress);
  CheckpointLoadOptions load = a.load;
  load.progress = loading.Callback();
  load.convert = a.convert;
  load.fp8_block = a.block;
  RESHARD_ASSIGN_OR_RETURN(
      r.load, LoadCheckpoint(ckpt, target, *buffers.checked, load));
  loading.Finish();
  r.load_seconds = SecondsSince(t0);
  t0 = Clock::now();
  RESHARD_ASSIGN_OR_RETURN(auto plan, PlanCheckpointWrite(target, a.write));
  RESHARD_RETURN_NOT_OK(CheckHfSideFilesAbsent(side, a.output));
  RESHARD_RETURN_NOT_OK(CreateCheckpointFiles(plan, a.output));
  ProgressLine writing("writing " + a.output, a.progress);
  CheckpointWriteOptions write = a.write;
  write.progress = writing.Callback();
  RESHARD_ASSIGN_OR_RETURN(
      r.write, WriteCheckpointFragments(plan, target, *buffers.checked,
                                        a.output, write));
  writing.Finish();
  RESHARD_RETURN_NOT_OK(WriteHfSideFiles(side, a.output));
  RESHARD_RETURN_NOT_OK(FinishCheckpoint(plan, a.output));
  r.write_seconds = SecondsSince(t0);
  r.files = plan.files().size();
  return r;
}

void PrintReshard(const ReshardArgs& a, const HfReshardReport& r) {
  if (!a.json) {
    std::cout << "loaded " << r.tensors << " tensors (" << r.load.bytes
              << " bytes, " << r.load.bytes_read << " bytes read from "
              << a.checkpoint << ") in " << r.load_seconds << " s; wrote "
              << r.write.bytes << " bytes as " << r.files << " files to "
              << a.output << " in " << r.write_seconds << " s";
    if (r.side_files > 0)
      std::cout << " with " << r.side_files << " side files";
    std::cout << "\n";
    return;
  }
  std::cout << RecordJson(r) << "\n";
}

void AddReshardCommand(CLI::App* hf) {
  auto* cmd = hf->add_subcommand(
      "reshard",
      "Load every fragment of TARGET from a checkpoint with ranged reads, "
      "then write OUT_DIR as a checkpoint from those buffers");
  auto a = std::make_shared<ReshardArgs>();
  cmd->add_option("CKPT_DIR", a->checkpoint, "checkpoint directory")
      ->required();
  cmd->add_option("TARGET", a->target, "target placement (JSON)")->required();
  cmd->add_option("OUT_DIR", a->output,
                  "output directory (created; must not hold a checkpoint)")
      ->required();
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->add_flag("--convert", a->convert,
                "convert tensors whose dtype differs from the checkpoint's "
                "(docs/conversion.md)");
  AddBlockOption(cmd, &a->block);
  AddProgressOption(cmd, &a->progress);
  cmd->add_option("--max-file-bytes", a->write.max_file_bytes,
                  "largest output file's tensor bytes (default 5e9)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--staging-bytes", a->load.staging_bytes,
                  "staging window of strided reads and writes (default 64 "
                  "MiB)")
      ->check(CLI::PositiveNumber);
  cmd->callback([a]() {
    a->write.staging_bytes = a->load.staging_bytes;
    auto r = RunReshard(*a);
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    PrintReshard(*a, *r);
  });
}

void AddImportCommand(CLI::App* hf) {
  auto* cmd = hf->add_subcommand(
      "import",
      "Make a checksummed weight-store revision of a checkpoint and its side "
      "files (config.json, generation config, tokenizer)");
  struct Args {
    std::string checkpoint, uri;
    bool json = false;
    ProgressMode progress = ProgressMode::kAuto;
    HfImportOptions options;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("CKPT_DIR", a->checkpoint,
                  "checkpoint directory (with its config.json)")
      ->required();
  cmd->add_option("URI", a->uri, "weight store (fs://DIR)")->required();
  cmd->add_option("--resource-id", a->options.resource_id,
                  "resource id (default: the config's model_type)");
  cmd->add_option("--revision", a->options.revision, "revision");
  cmd->add_option(
      "--generation,--weight-generation", a->options.weight_generation,
      "weight generation (--weight-generation: the library's name)");
  cmd->add_option("--max-fragment-bytes", a->options.max_fragment_bytes,
                  "largest stored fragment (slab) and so the memory used "
                  "(default 64 MiB)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", a->json, "print one JSON object");
  AddProgressOption(cmd, &a->progress);
  cmd->callback([a]() {
    auto run = [&]() -> Result<HfImportReport> {
      RESHARD_ASSIGN_OR_RETURN(auto ckpt, HfCheckpoint::Open(a->checkpoint));
      const std::string config_path = a->checkpoint + "/config.json";
      RESHARD_ASSIGN_OR_RETURN(std::string config,
                               ReadFile(config_path, InputKind::kHfConfig));
      RESHARD_ASSIGN_OR_RETURN(auto store, WeightStore::Open(a->uri));
      ProgressLine line("importing " + a->checkpoint, a->progress);
      HfImportOptions options = a->options;
      options.progress = line.Callback();
      auto r = ImportCheckpoint(ckpt, config, store, options);
      if (!r.ok()) return r.status().WithContext(a->checkpoint);
      return r;
    };
    const auto t0 = Clock::now();
    auto r = run();
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    if (!a->json) {
      std::cout << r->manifest_key << "\n";
      return;
    }
    std::cout << RecordJson(*r, {{"seconds", SecondsSince(t0)}}) << "\n";
  });
}

void AddExportCommand(CLI::App* hf) {
  auto* cmd = hf->add_subcommand(
      "export",
      "Write a weight-store revision out as a checkpoint with the side files "
      "stored with it");
  struct Args {
    std::string uri, key, output;
    bool json = false;
    ProgressMode progress = ProgressMode::kAuto;
    CheckpointWriteOptions options;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("URI", a->uri, "weight store (fs://DIR)")->required();
  cmd->add_option("MANIFEST_KEY", a->key, "the revision's manifest key")
      ->required();
  cmd->add_option("OUT_DIR", a->output,
                  "output directory (created; must not hold a checkpoint)")
      ->required();
  cmd->add_option("--max-file-bytes", a->options.max_file_bytes,
                  "largest output file's tensor bytes (default 5e9)")
      ->check(CLI::PositiveNumber);
  cmd->add_option("--staging-bytes", a->options.staging_bytes,
                  "read window (default 64 MiB)")
      ->check(CLI::PositiveNumber);
  cmd->add_flag("--json", a->json, "print one JSON object");
  AddProgressOption(cmd, &a->progress);
  cmd->callback([a]() {
    auto run = [&]() -> Result<HfExportReport> {
      RESHARD_ASSIGN_OR_RETURN(auto store, OpenExistingStore(a->uri));
      RESHARD_ASSIGN_OR_RETURN(auto manifest, store.ReadManifest(a->key));
      ProgressLine line("exporting " + a->key, a->progress);
      CheckpointWriteOptions options = a->options;
      options.progress = line.Callback();
      return ExportCheckpoint(store, manifest, a->output, options);
    };
    const auto t0 = Clock::now();
    auto r = run();
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    if (r->side_files == 0) {
      std::cerr << "reshard hf export: " << a->key
                << " holds no side files (config.json, tokenizer): "
                << a->output << " holds the weights only\n";
    }
    if (!a->json) {
      std::cout << "wrote " << r->bytes << " bytes as " << r->files
                << " files and " << r->side_files << " side files to "
                << a->output << "\n";
      return;
    }
    std::cout << RecordJson(*r, {{"seconds", SecondsSince(t0)}}) << "\n";
  });
}

}  // namespace

void AddHfCommand(CLI::App& app) {
  auto* hf = app.add_subcommand("hf", "Hugging Face checkpoints");
  hf->require_subcommand(1);
  AddLayoutCommand(hf);
  AddReshardCommand(hf);
  AddSourceCommand(hf);
  AddImportCommand(hf);
  AddExportCommand(hf);
}

}  // namespace reshard::cli
