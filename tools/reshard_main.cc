// The reshard command-line tool: argument parsing plus public API calls.

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "tools/cli_common.h"
#include "tools/commands.h"
#include "util/printable.h"

namespace reshard::cli {

Result<std::string> ReadFile(const std::string& path) {
  if (path == "-") {
    std::ostringstream ss;
    ss << std::cin.rdbuf();
    return ss.str();
  }
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return Status::IOError("cannot read " + path + ": " + std::strerror(errno));
  }
  std::string out;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  if (failed) return Status::IOError("error reading " + path);
  return out;
}

Result<WeightPlacementManifest> LoadPlacement(const std::string& path) {
  RESHARD_ASSIGN_OR_RETURN(std::string text, ReadFile(path));
  auto m = WeightPlacementFromJson(text);
  if (!m.ok()) return m.status().WithContext(path);
  return m;
}

void AddGridOptions(CLI::App* cmd, ParallelSizes* sizes) {
  cmd->add_option("--tp", sizes->tp, "tensor-parallel size");
  cmd->add_option("--pp", sizes->pp, "pipeline-parallel size");
  cmd->add_option("--ep", sizes->ep, "expert-parallel size");
  cmd->add_option("--dp", sizes->dp, "data-parallel size");
}

int Fail(const Status& status) {
  std::cerr << "reshard: error: " << status.message() << "\n";
  return 1;
}

}  // namespace reshard::cli

int main(int argc, char** argv) {
  CLI::App app{
      "reshard: move model weights between parallel layouts, exactly."};
  app.require_subcommand(1);
  // Usage errors are one line like every other error, with the offending
  // argument escaped (set before the subcommands, which copy it).
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return "reshard: error: " + reshard::internal::Printable(e.what(), 1024) +
           " (run with --help for usage)\n";
  });
  reshard::cli::AddValidateCommand(app);
  reshard::cli::AddCanonicalizeCommand(app);
  reshard::cli::AddPlanCommand(app);
  reshard::cli::AddGenCommand(app);
  reshard::cli::AddSelftestCommand(app);
  reshard::cli::AddImportLegacyCommand(app);
  reshard::cli::AddStoreCommand(app);
  reshard::cli::AddDemoCommand(app);
  reshard::cli::AddHfCommand(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::RuntimeError& e) {
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return 0;
}
