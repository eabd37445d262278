// Shared helpers of the reshard CLI subcommands.

#ifndef RESHARD_TOOLS_CLI_COMMON_H_
#define RESHARD_TOOLS_CLI_COMMON_H_

#include <string>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace CLI {
class App;
}  // namespace CLI

namespace reshard::cli {

// Reads a whole file ("-" is standard input).
Result<std::string> ReadFile(const std::string& path);

// Reads and decodes a placement file; errors name the file.
Result<WeightPlacementManifest> LoadPlacement(const std::string& path);

// The grid flags --tp, --pp, --ep and --dp of a layout command, into
// `sizes`.
void AddGridOptions(CLI::App* cmd, ParallelSizes* sizes);

// Prints "reshard: error: <message>" to stderr and returns exit code 1.
int Fail(const Status& status);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_COMMON_H_
