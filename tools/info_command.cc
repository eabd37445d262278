// `reshard info [--json]`: what this build and machine offer, for scripts
// that choose a path before they move anything: the CUDA backend (built,
// the runtime's version, the devices visible) and the NCCL M2N backend
// (whether its plugin was built, and where).

#include <cstdio>
#include <string>

#include "exec_m2n/m2n_backend.h"
#include "reshard/backends/cuda_transport.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "util/canonical_json.h"

namespace reshard::cli {

namespace {

std::string InfoJson(const CudaInfo& cuda) {
  std::string out;
  internal::CanonicalJsonWriter w(&out, internal::JsonAscii::kRawUtf8);
  w.BeginObject();
  w.Key("cuda");
  w.BeginObject();
  w.Key("built");
  w.Bool(cuda.built);
  w.KeyInt("devices", cuda.devices);
  w.KeyString("runtime", cuda.runtime);
  w.EndObject();
  w.Key("nccl_m2n");
  w.BeginObject();
  w.Key("built");
  w.Bool(m2n::M2nBuilt());
  w.KeyString("plugin", m2n::M2nPluginPath());
  w.EndObject();
  w.EndObject();
  return out;
}

}  // namespace

void AddInfoCommand(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "info",
      "What this build and machine offer (the CUDA and NCCL M2N backends)");
  auto json = std::make_shared<bool>(false);
  cmd->add_flag("--json", *json, "print one JSON object");
  cmd->callback([json]() {
    const CudaInfo cuda = QueryCuda();
    if (*json) {
      std::printf("%s\n", InfoJson(cuda).c_str());
      return;
    }
    if (!cuda.built) {
      std::printf("cuda: not built (configure with -DRESHARD_CUDA=ON)\n");
    } else {
      std::printf("cuda: built, runtime %s, %d device%s\n",
                  cuda.runtime.c_str(), cuda.devices,
                  cuda.devices == 1 ? "" : "s");
    }
    if (!m2n::M2nBuilt()) {
      std::printf("nccl m2n: not built (make m2n-venv, then configure)\n");
    } else {
      std::printf("nccl m2n: built, plugin %s\n", m2n::M2nPluginPath().c_str());
    }
  });
}

}  // namespace reshard::cli
