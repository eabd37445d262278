// `reshard demo [--procs N] [--model SPEC.json]`: the main job on embedded
// defaults, with nothing but the binary. A small MoE laid out as a trainer
// (TP4/PP2/EP8/DP2) is resharded into a rollout layout (TP8/PP4/EP2/DP4)
// three ways, every target byte checked each time: in memory, live between
// N processes over UCX, and through a weight store revision.

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <string>

#include "reshard/gen.h"
#include "selftest/selftest.h"
#include "tools/cli_common.h"
#include "tools/commands.h"

namespace reshard::cli {
namespace {

// examples/models/small-moe.json.
constexpr std::string_view kSmallMoe = R"({
  "name": "small-moe",
  "layers": 4, "hidden": 512, "vocab": 16384,
  "dtype": "bfloat16", "itemsize": 2,
  "attention": {"kind": "gqa", "heads": 8, "kv_heads": 4, "head_dim": 64,
                "qk_norm": true},
  "mlp": {"intermediate": 1408},
  "moe": {"experts": 16, "moe_intermediate": 256, "shared_experts": 1,
          "router_bias": true, "dense_layers": 1}
})";

void Row(const char* how, const SelfTestReport& r) {
  const double gbps = r.seconds > 0 ? r.bytes / r.seconds / 1e9 : 0;
  std::printf("%-34s %-8s %12llu %10llu %9.4f %8.2f\n", how,
              r.verified ? "verified" : "MISMATCH",
              static_cast<unsigned long long>(r.bytes),
              static_cast<unsigned long long>(r.operations), r.seconds, gbps);
}

}  // namespace

void AddDemoCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "demo",
      "Reshard a small MoE from a trainer to a rollout layout in memory, "
      "live over UCX and through a weight store, checking every byte");
  struct Args {
    uint32_t procs = 4;
    std::string model;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--procs", a->procs, "processes of the live run")
      ->check(CLI::Range(2u, 64u));
  cmd->add_option("--model", a->model, "model spec (default: small-moe)");
  cmd->callback([a]() {
    auto run = [&]() -> Status {
      std::string spec_text(kSmallMoe);
      if (!a->model.empty()) {
        RESHARD_ASSIGN_OR_RETURN(spec_text,
                                 ReadFile(a->model, InputKind::kModelSpec));
      }
      RESHARD_ASSIGN_OR_RETURN(auto model, ModelSpecFromJson(spec_text));
      RESHARD_ASSIGN_OR_RETURN(
          auto trainer,
          GenerateLayout(model,
                         {.sizes = {.tp = 4, .pp = 2, .ep = 8, .dp = 2}}));
      RESHARD_ASSIGN_OR_RETURN(
          auto rollout,
          GenerateLayout(model,
                         {.sizes = {.tp = 8, .pp = 4, .ep = 2, .dp = 4}}));
      std::printf(
          "%s: trainer TP4/PP2/EP8/DP2 (%zu fragments) -> rollout "
          "TP8/PP4/EP2/DP4 (%zu fragments)\n",
          model.name.c_str(), trainer.fragments().size(),
          rollout.fragments().size());
      std::printf("%-34s %-8s %12s %10s %9s %8s\n", "path", "check", "bytes",
                  "regions", "seconds", "GB/s");
      const uint32_t threads =
          static_cast<uint32_t>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
      SelfTestOptions local;
      local.threads = threads;
      local.measure_memcpy = false;
      RESHARD_ASSIGN_OR_RETURN(auto r1, RunSelfTest(trainer, rollout, local));
      Row("in memory (local executor)", r1);
      SelfTestOptions live;
      live.transport = "ucx";
      live.procs = a->procs;
      live.measure_memcpy = false;
      RESHARD_ASSIGN_OR_RETURN(auto r2, RunSelfTest(trainer, rollout, live));
      Row(("live, " + std::to_string(a->procs) + " processes over UCX").c_str(),
          r2);
      std::string dir =
          (std::filesystem::temp_directory_path() / "reshard-demo-XXXXXX");
      if (::mkdtemp(dir.data()) == nullptr) {
        return Status::IOError("cannot create a temporary store directory");
      }
      SelfTestOptions store;
      store.via_store = "fs://" + dir;
      store.measure_memcpy = false;
      auto r3 = RunSelfTest(trainer, rollout, store);
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
      RESHARD_RETURN_NOT_OK(r3.status());
      Row("weight store (upload + load)", *r3);
      if (!r1.verified || !r2.verified || !r3->verified) {
        return Status::DataLoss("demo: a target byte differs");
      }
      std::printf("demo: ok, every target byte verified on all three paths\n");
      return Status::OK();
    };
    Status st = run();
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

}  // namespace reshard::cli
