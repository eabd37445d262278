// Shared helpers of the reshard CLI subcommands.

#ifndef RESHARD_TOOLS_CLI_COMMON_H_
#define RESHARD_TOOLS_CLI_COMMON_H_

#include <string>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard::cli {

// Reads a whole file ("-" is standard input).
Result<std::string> ReadFile(const std::string& path);

// Reads and decodes a placement file; errors name the file.
Result<WeightPlacementManifest> LoadPlacement(const std::string& path);

// Prints "reshard: error: <message>" to stderr and returns exit code 1.
int Fail(const Status& status);

}  // namespace reshard::cli

#endif  // RESHARD_TOOLS_CLI_COMMON_H_
