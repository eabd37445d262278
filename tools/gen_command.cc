// `reshard gen --model SPEC.json --tp N --pp N --ep N --dp N
//   [--experts grouped|separate] -o PLACEMENT.json`.

#include <iostream>

#include "reshard/gen.h"
#include "reshard/placement.h"
#include "tools/cli_common.h"
#include "tools/commands.h"

namespace reshard::cli {

void AddGenCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "gen", "Generate a placement of a model on a TP/PP/EP/DP grid");
  struct Args {
    std::string model;
    std::string output;
    std::string experts = "grouped";
    LayoutOptions options;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("--model", a->model, "model spec (JSON)")->required();
  AddGridOptions(cmd, &a->options.sizes);
  cmd->add_option("--experts", a->experts,
                  "expert tensors: grouped (EP split) or separate (EP "
                  "ownership)")
      ->check(CLI::IsMember({"grouped", "separate"}));
  cmd->add_option("--resource-id", a->options.resource_id,
                  "resource id (default: the model name)");
  cmd->add_option("--revision", a->options.revision, "revision");
  cmd->add_option(
      "--generation,--weight-generation", a->options.weight_generation,
      "weight generation (--weight-generation: the library's name)");
  cmd->add_option("-o,--output", a->output, "output file ('-' for stdout)")
      ->required();
  cmd->callback([a]() {
    auto run = [&]() -> Status {
      RESHARD_ASSIGN_OR_RETURN(std::string text,
                               ReadFile(a->model, InputKind::kModelSpec));
      auto spec = ModelSpecFromJson(text);
      if (!spec.ok()) return spec.status().WithContext(a->model);
      a->options.experts = a->experts == "separate" ? ExpertTensors::kSeparate
                                                    : ExpertTensors::kGrouped;
      RESHARD_ASSIGN_OR_RETURN(auto placement,
                               GenerateLayout(*spec, a->options));
      const std::string json = WeightPlacementToJson(placement);
      RESHARD_RETURN_NOT_OK(WriteOutput("-o", a->output, json));
      std::cerr << "reshard gen: " << placement.tensors().size() << " tensors, "
                << placement.fragments().size() << " fragments, "
                << placement.topology().world_size()
                << " participants; placement_id " << placement.placement_id()
                << "\n";
      return Status::OK();
    };
    Status st = run();
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

}  // namespace reshard::cli
