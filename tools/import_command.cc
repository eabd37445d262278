// `reshard import-legacy INVENTORY.json... --tp N --pp N --ep N --dp N
//   -o PLACEMENT.json [--bindings-dir DIR]`.

#include <filesystem>
#include <iostream>

#include "reshard/legacy.h"
#include "tools/cli_common.h"
#include "tools/commands.h"

namespace reshard::cli {

void AddImportLegacyCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "import-legacy",
      "Convert flat legacy runtime inventories (one per participant) into a "
      "placement and runtime bindings");
  struct Args {
    std::vector<std::string> inputs;
    std::string output;
    std::string bindings_dir;
    LegacyImportOptions options;
  };
  auto a = std::make_shared<Args>();
  cmd->add_option("INVENTORY", a->inputs, "legacy inventory files")->required();
  AddGridOptions(cmd, &a->options.sizes);
  cmd->add_option("--placement-set-id", a->options.placement_set_id,
                  "placement_set_id (default: <model_id>-legacy)");
  cmd->add_option("-o,--output", a->output, "placement output file")
      ->required();
  cmd->add_option(
      "--bindings-dir", a->bindings_dir,
      "write one binding per participant as DIR/<participant>.json");
  cmd->callback([a]() {
    auto run = [&]() -> Status {
      std::vector<std::string> texts;
      for (const auto& path : a->inputs) {
        RESHARD_ASSIGN_OR_RETURN(std::string text,
                                 ReadFile(path, InputKind::kPlacement));
        texts.push_back(std::move(text));
      }
      std::vector<std::string_view> views(texts.begin(), texts.end());
      RESHARD_ASSIGN_OR_RETURN(auto imported,
                               ImportLegacyInventories(views, a->options));
      RESHARD_RETURN_NOT_OK(WriteOutput(
          "-o", a->output, WeightPlacementToJson(imported.placement)));
      if (!a->bindings_dir.empty()) {
        std::filesystem::create_directories(a->bindings_dir);
        for (const auto& b : imported.bindings) {
          RESHARD_RETURN_NOT_OK(
              WriteOutput("--bindings-dir",
                          a->bindings_dir + "/" + b.participant_id() + ".json",
                          WeightRuntimeBindingToJson(b)));
        }
      }
      std::cerr << "reshard import-legacy: "
                << imported.placement.fragments().size() << " fragments, "
                << imported.bindings.size() << " bindings; placement_id "
                << imported.placement.placement_id() << "\n";
      return Status::OK();
    };
    Status st = run();
    if (!st.ok()) throw CLI::RuntimeError(Fail(st));
  });
}

}  // namespace reshard::cli
