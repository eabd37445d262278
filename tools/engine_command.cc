// `reshard engine layout|load|reshard`: the parameters trainers and
// inference engines hold (docs/engines.md).
//
//   reshard engine layout CONFIG --engine NAME --tp N [--pp N] [--ep N]
//                         [--dp N] -o PLACEMENT.json [--params PARAMS.json]
//   reshard engine load CKPT --engine NAME --tp N ... -o OUTDIR
//                       [--participant ID] [--json]
//   reshard engine reshard SRCDIR DSTDIR --config CONFIG --from NAME
//                          [--from-tp N ...] --to NAME [--to-tp N ...]
//                          [--via local|ucx|STORE_URI] [--json]

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>

#include "engine/presets.h"
#include "reshard/engine.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "tools/engine_reshard.h"
#include "util/canonical_json.h"

namespace reshard::cli {
namespace {

using Clock = std::chrono::steady_clock;

// --engine and the Megatron vocabulary multiple, with `prefix` ("" or
// "from-"/"to-") on the grid flags.
void AddEngineOptions(CLI::App* cmd, EngineLayoutOptions* o,
                      const std::string& prefix, const std::string& engine) {
  cmd->add_option("--" + engine, o->engine,
                  "engine spec NAME[@RELEASE|@<RELEASE]: hf, megatron, "
                  "sglang, vllm (the newest release, = vllm@0.33), "
                  "vllm@0.33, vllm@<0.33, vllm@<0.10.2 (docs/engines.md)")
      ->required()
      ->check(CLI::Validator(
          [](std::string& spec) -> std::string {
            auto r = internal::ResolveEngine(spec);
            return r.ok() ? std::string() : r.status().message();
          },
          "SPEC"));
  cmd->add_option_function<std::string>(
         "--" + prefix + "sequence-parallel-moe",
         [o](const std::string& v) {
           o->sequence_parallel_moe = *ParseSequenceParallelMoe(v);
         },
         "vllm, sglang: auto (vLLM's rule: EP, TP > 1 and DP > 1), on "
         "(refused where that rule does not hold) or off (an all2all "
         "backend without it); shared experts whole under it")
      ->check(CLI::IsMember({"auto", "on", "off"}));
  if (prefix.empty()) {
    AddGridOptions(cmd, &o->sizes);
    cmd->add_option("--make-vocab-size-divisible-by",
                    o->make_vocab_size_divisible_by,
                    "Megatron: the vocabulary is padded to a multiple of "
                    "this times TP (default 128)");
    AddFormOptions(cmd, &o->quantize, &o->block, &o->dtype);
    return;
  }
  const char* names[] = {"tp", "pp", "ep", "dp"};
  int64_t* sizes[] = {&o->sizes.tp, &o->sizes.pp, &o->sizes.ep, &o->sizes.dp};
  for (int i = 0; i < 4; ++i) {
    cmd->add_option("--" + prefix + names[i], *sizes[i],
                    std::string(names[i]) + " size of the " +
                        (prefix == "from-" ? "source" : "target") + " grid");
  }
  cmd->add_option("--" + prefix + "make-vocab-size-divisible-by",
                  o->make_vocab_size_divisible_by,
                  "Megatron vocabulary multiple (default 128)");
  auto* q = cmd->add_option("--" + prefix + "quantize", o->quantize,
                            "fp8: this side's FP8 form")
                ->check(CLI::IsMember({"fp8"}));
  auto* d = cmd->add_option("--" + prefix + "dtype", o->dtype,
                            "this side's float dtype (no scales)")
                ->check(CLI::IsMember({"float32", "bfloat16", "float16"}));
  q->excludes(d);
}

void AddLayoutCommand(CLI::App* engine) {
  auto* cmd = engine->add_subcommand(
      "layout",
      "An engine's placement of a model, and optionally every participant's "
      "parameter map");
  struct Args {
    std::string config, checkpoint, output, params, declare;
    EngineLayoutOptions options;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("CONFIG", a->config, "the model's config.json")->required();
  AddEngineOptions(cmd, &a->options, "", "engine");
  cmd->add_option("--checkpoint", a->checkpoint,
                  "checkpoint directory: its tensors, dtypes and shapes");
  cmd->add_option("--resource-id", a->options.resource_id,
                  "resource id (default: the config's model_type)");
  cmd->add_option("--revision", a->options.revision, "revision");
  cmd->add_option("-o,--output", a->output, "placement file ('-' for stdout)")
      ->required();
  cmd->add_option("--params", a->params,
                  "parameter maps file ('-' for stdout)");
  cmd->add_option("--declare", a->declare,
                  "the parameter maps' fingerprints, as the engine holding "
                  "them declares them to --declared-maps ('-' for stdout)");
  cmd->callback([a]() {
    auto run = [&]() -> Status {
      RESHARD_ASSIGN_OR_RETURN(std::string config,
                               ReadFile(a->config, InputKind::kHfConfig));
      std::optional<HfCheckpoint> ckpt;
      if (!a->checkpoint.empty()) {
        RESHARD_ASSIGN_OR_RETURN(ckpt, HfCheckpoint::Open(a->checkpoint));
      }
      auto layout =
          MakeEngineLayout(config, a->options, ckpt ? &*ckpt : nullptr);
      if (!layout.ok()) return layout.status().WithContext(a->config);
      // Both outputs or neither, never one file for both.
      std::vector<CommandOutput> outputs = {
          {"-o", a->output, WeightPlacementToJson(layout->placement())}};
      if (!a->params.empty()) {
        outputs.push_back(
            {"--params", a->params, EngineParametersToJson(*layout)});
      }
      if (!a->declare.empty()) {
        RESHARD_ASSIGN_OR_RETURN(auto declared, DeclareParameterMaps(*layout));
        outputs.push_back(
            {"--declare", a->declare, DeclaredParameterMapsToJson(declared)});
      }
      RESHARD_RETURN_NOT_OK(WriteOutputs(outputs));
      size_t params = 0;
      for (const auto& p : layout->participants())
        params += p.parameters.size();
      std::cerr << "reshard engine layout: " << a->options.engine << ", "
                << layout->participants().size() << " participants, " << params
                << " parameters, " << layout->placement().tensors().size()
                << " tensors; "
                << "placement_id " << layout->placement().placement_id()
                << "\n";
      return Status::OK();
    };
    Status st = run();
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

struct LoadArgs {
  std::string checkpoint, output, participant, declared_maps;
  bool json = false;
  bool convert = false;
  EngineLayoutOptions options;
};

// What `engine load` wrote, summed over the participants.
struct EngineLoadReport {
  uint64_t participants = 0, parameters = 0, bytes = 0, bytes_read = 0;
  uint64_t padding_bytes = 0;
  double seconds = 0;  // the whole command
};

// Every field of `r`, names sorted (reshard/fields.h): what `engine load
// --json` prints.
template <typename Visit>
void VisitFields(const EngineLoadReport& r, Visit&& visit) {
  visit("bytes", r.bytes);
  visit("bytes_read", r.bytes_read);
  visit("padding_bytes", r.padding_bytes);
  visit("parameters", r.parameters);
  visit("participants", r.participants);
  visit("seconds", r.seconds);
}

// With `path` (--declared-maps): the maps `layout` built must be those the
// engine declares in that file (DeclaredParameterMapsToJson, as `engine
// layout --declare` writes it), refused naming the first differing
// parameter. Nothing is read or written before this check.
Status CheckDeclaredMaps(const EngineLayout& layout, const std::string& path) {
  if (path.empty()) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(std::string text,
                           ReadFile(path, InputKind::kPlacement));
  auto declared = DeclaredParameterMapsFromJson(text);
  if (!declared.ok()) return declared.status().WithContext(path);
  return CheckDeclaredParameterMaps(layout, *declared,
                                    "--declared-maps " + path);
}

// Loads each selected participant's parameters from the checkpoint and
// writes its file.
Status RunLoad(const LoadArgs& a, EngineLoadReport* total) {
  RESHARD_ASSIGN_OR_RETURN(auto ckpt, HfCheckpoint::Open(a.checkpoint));
  RESHARD_ASSIGN_OR_RETURN(
      std::string config,
      ReadFile(a.checkpoint + "/config.json", InputKind::kHfConfig));
  auto layout = MakeEngineLayout(config, a.options, &ckpt);
  if (!layout.ok()) return layout.status().WithContext(a.checkpoint);
  if (!a.participant.empty() &&
      layout->FindParticipant(a.participant) == nullptr) {
    return Status::InvalidArgument("--participant: the " + a.options.engine +
                                   " layout has no participant \"" +
                                   a.participant + "\"");
  }
  RESHARD_RETURN_NOT_OK(CheckDeclaredMaps(*layout, a.declared_maps));
  RESHARD_RETURN_NOT_OK(CheckOutputDir(a.output, *layout, a.participant));
  // Every refusal of the loads below (a dtype that differs without
  // --convert, a conversion no rule allows) before OUTDIR is created.
  // The presets hold some tensors in float32 whatever the model dtype
  // (internal::HoldsFloat32: router biases, A_log), and the engines widen
  // a 16-bit checkpoint's exactly when they load it: so does the load,
  // without --convert. Any other dtype difference needs it.
  if (!a.convert) {
    RESHARD_ASSIGN_OR_RETURN(const internal::HfConfig hf,
                             internal::ParseHfConfig(config));
    if (const TensorDescriptor* t =
            internal::FirstConversionBeyondWidening(ckpt, *layout, hf.arch)) {
      return Status::InvalidArgument(
          "tensor " + t->tensor_id() + " is " +
          ckpt.FindTensor(t->tensor_id())->dtype + " in the checkpoint but " +
          t->dtype() +
          " in the target placement: converting it needs "
          "CheckpointLoadOptions::convert (--convert, convert=True)");
    }
  }
  // Every dtype difference left is allowed: the load converts it.
  const bool convert = true;
  CheckpointLoadOptions checks;
  checks.convert = convert;
  checks.fp8_block = a.options.block;
  RESHARD_RETURN_NOT_OK(CheckCheckpointLoad(ckpt, layout->placement(), checks));
  RESHARD_RETURN_NOT_OK(CreateOutputDir(a.output));
  BufferBindingOptions bo;
  bo.instance_id = "engine-load";
  const std::string map_id = EngineParameterMapId(*layout);
  for (const EngineParticipant& p : layout->participants()) {
    if (!a.participant.empty() && p.participant_id != a.participant) {
      continue;
    }
    RESHARD_ASSIGN_OR_RETURN(auto memory, ParameterMemory::Allocate(p));
    // Checked once, here; the load does not check it again.
    RESHARD_ASSIGN_OR_RETURN(
        CheckedBindings binding,
        BindCheckedParameters(*layout, p.participant_id, memory.buffers(), bo));
    CheckpointLoadOptions lo;
    lo.convert = convert;
    lo.fp8_block = a.options.block;
    RESHARD_ASSIGN_OR_RETURN(
        auto loaded, LoadCheckpoint(ckpt, layout->placement(), binding, lo));
    RESHARD_RETURN_NOT_OK(
        ZeroParameterPadding(*layout, p.participant_id, memory.buffers()));
    RESHARD_RETURN_NOT_OK(WriteParameterFile(
        ParameterFilePath(a.output, p.participant_id), p, memory.buffers(),
        ParameterFileIdentityOf(*layout, p.participant_id, map_id)));
    ++total->participants;
    total->parameters += p.parameters.size();
    CountPieceBytes(p, &total->bytes, &total->padding_bytes);
    total->bytes_read += loaded.bytes_read;
  }
  return Status::OK();
}

void AddLoadCommand(CLI::App* engine) {
  auto* cmd = engine->add_subcommand(
      "load",
      "Write each participant's parameters, as the engine holds them after "
      "loading, from a checkpoint (OUTDIR/<participant>.safetensors)");
  auto a = std::make_shared<LoadArgs>();
  cmd->add_option("CKPT", a->checkpoint,
                  "checkpoint directory (with its config.json)")
      ->required();
  AddEngineOptions(cmd, &a->options, "", "engine");
  cmd->add_option("-o,--output", a->output,
                  "output directory (created; its files must not exist)")
      ->required();
  cmd->add_option("--participant", a->participant,
                  "only this participant (default: every one)");
  cmd->add_option("--declared-maps", a->declared_maps,
                  "the parameter maps the engine declares (engine layout "
                  "--declare): refuse a layout whose maps differ");
  cmd->add_flag("--convert", a->convert,
                "convert tensors whose dtype differs from the checkpoint's "
                "(with --quantize or --dtype)");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a]() {
    const auto t0 = Clock::now();
    EngineLoadReport total;
    Status st = RunLoad(*a, &total);
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
    if (!a->json) {
      std::cout << "wrote " << total.participants << " participants ("
                << total.parameters << " parameters, " << total.bytes
                << " bytes and " << total.padding_bytes << " of padding; "
                << total.bytes_read << " bytes read from the checkpoint) to "
                << a->output << "\n";
      return;
    }
    total.seconds = SecondsSince(t0);
    std::cout << RecordJson(total) << "\n";
  });
}

void PrintReshard(const EngineReshardReport& r, const EngineReshardArgs& run,
                  bool json) {
  if (!json) {
    std::cout << "moved " << r.bytes << " bytes into " << r.files
              << " target files in " << run.target_dir << " via " << run.via
              << " in " << r.seconds << " s\n";
    return;
  }
  std::cout << RecordJson(r) << "\n";
}

void AddReshardCommand(CLI::App* engine) {
  auto* cmd = engine->add_subcommand(
      "reshard",
      "Per-participant parameter files of one engine layout into those of "
      "another");
  struct Args {
    std::string config, revision, declared_maps;
    EngineLayoutOptions from, to;
    EngineReshardArgs run;
    bool json = false;
    std::string timeout_s = "120";  // as given: NumberFlag checks it
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("SRCDIR", a->run.source_dir,
                  "source files (<participant>.safetensors, as engine load "
                  "writes them)")
      ->required();
  cmd->add_option("DSTDIR", a->run.target_dir,
                  "target directory (created; its files must not exist)")
      ->required();
  cmd->add_option("--config", a->config, "the model's config.json")->required();
  AddEngineOptions(cmd, &a->from, "from-", "from");
  AddEngineOptions(cmd, &a->to, "to-", "to");
  cmd->add_option("--via", a->run.via,
                  "local (this process, default), ucx (two processes) or a "
                  "weight store URI to upload a revision to and load from");
  cmd->add_option("--revision", a->revision,
                  "--via STORE_URI: the uploaded revision (default: "
                  "engine-<unix ms>)");
  cmd->add_flag("--convert", a->run.convert,
                "convert tensors whose dtype differs (--from-/--to-quantize, "
                "--from-/--to-dtype); on every --via");
  cmd->add_option("--declared-maps", a->declared_maps,
                  "the parameter maps the target engine declares (engine "
                  "layout --declare): refuse a --to layout whose maps differ, "
                  "before anything is read");
  cmd->add_flag("--trust-file-names", a->run.trust_file_names,
                "take source files that carry no identity (not written by "
                "engine load or engine reshard) by their names; a file whose "
                "identity differs is refused either way");
  AddBlockOption(cmd, &a->run.block);
  cmd->add_option("--threads", a->run.threads, "copy threads (local)")
      ->check(CLI::Range(1, 256));
  cmd->add_option("--timeout", a->timeout_s,
                  "seconds (ucx), from 0.1 to 86400; default 120");
  cmd->add_flag("--json", a->json, "print one JSON object");
  cmd->callback([a]() {
    auto run = [&]() -> Result<EngineReshardReport> {
      // Finite and in range (nan would pass a range check and overflow the
      // milliseconds), before anything is read.
      RESHARD_ASSIGN_OR_RETURN(
          const double timeout_s,
          NumberFlag("--timeout", a->timeout_s, 0.1, 86400.0,
                     "a number of seconds from 0.1 to 86400"));
      RESHARD_ASSIGN_OR_RETURN(std::string config,
                               ReadFile(a->config, InputKind::kHfConfig));
      std::string revision = a->revision;
      if (revision.empty()) {
        revision = "engine-" +
                   std::to_string(
                       std::chrono::duration_cast<std::chrono::milliseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count());
      }
      a->from.revision = a->to.revision = revision;
      a->from.block = a->to.block = a->run.block;
      auto source = MakeEngineLayout(config, a->from);
      if (!source.ok()) return source.status().WithContext("--from");
      auto target = MakeEngineLayout(config, a->to);
      if (!target.ok()) return target.status().WithContext("--to");
      RESHARD_RETURN_NOT_OK(CheckDeclaredMaps(*target, a->declared_maps));
      a->run.timeout =
          std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
      return RunEngineReshard(*source, *target, a->run);
    };
    auto r = run();
    if (!r.ok()) throw CLI::RuntimeError(Fail(r.status()));
    PrintReshard(*r, a->run, a->json);
  });
}

}  // namespace

void AddEngineCommand(CLI::App& app) {
  auto* engine = app.add_subcommand(
      "engine", "Engine layouts: Megatron-Core and vLLM parameters");
  engine->require_subcommand(1);
  AddLayoutCommand(engine);
  AddLoadCommand(engine);
  AddReshardCommand(engine);
}

}  // namespace reshard::cli
