// Registration of the reshard CLI subcommands.

#ifndef RESHARD_TOOLS_COMMANDS_H_
#define RESHARD_TOOLS_COMMANDS_H_

#include <CLI/CLI.hpp>

namespace reshard::cli {

void AddValidateCommand(CLI::App& app);
void AddCanonicalizeCommand(CLI::App& app);
void AddPlanCommand(CLI::App& app);
void AddGenCommand(CLI::App& app);
void AddSelftestCommand(CLI::App& app);
void AddImportLegacyCommand(CLI::App& app);
void AddStoreCommand(CLI::App& app);
void AddDemoCommand(CLI::App& app);
void AddHfCommand(CLI::App& app);
void AddEngineCommand(CLI::App& app);
void AddInfoCommand(CLI::App& app);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_COMMANDS_H_
