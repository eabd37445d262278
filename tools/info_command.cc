// `reshard info [--json]`: what this build and machine offer, for scripts
// that choose a path before they move anything: the CUDA backend (built,
// the runtime's version, the devices visible), the NCCL M2N backend
// (whether its plugin was built, and where) and whether the "ucx" peer
// exchange moves CUDA memory itself (its UCX built with CUDA support).

#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "exec_m2n/m2n_backend.h"
#include "reshard/backends/cuda_transport.h"
#include "reshard/sdk/peer_exchange.h"
#include "tools/cli_common.h"
#include "tools/commands.h"
#include "util/canonical_json.h"

namespace reshard::cli {

namespace {

// Whether the exchange `name`, made with `options`, declares CUDA memory
// (PeerExchangeCapabilities::memory_kinds): for "ucx" with memory=auto,
// whether its UCX context reports CUDA memory (UCX_* variables apply).
// False where it cannot be made.
bool ExchangeMovesCudaMemory(std::string_view name,
                             const PeerExchangeOptions& options) {
  PeerExchangeConfig config;
  config.options = options;
  Result<std::unique_ptr<PeerExchange>> exchange =
      MakePeerExchange(name, config);
  if (!exchange.ok()) return false;
  const std::vector<MemoryKind> kinds =
      (*exchange)->capabilities().memory_kinds;
  return std::find(kinds.begin(), kinds.end(), MemoryKind::kCuda) !=
         kinds.end();
}

std::string InfoJson(const CudaInfo& cuda, bool cuda_exchange) {
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
  w.Key("ucx");
  w.BeginObject();
  w.Key("cuda_memory");
  w.Bool(cuda_exchange);
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
    PeerExchangeOptions as_reported;
    as_reported.Set("memory", "auto");
    const bool cuda_exchange = ExchangeMovesCudaMemory("ucx", as_reported);
    if (*json) {
      std::printf("%s\n", InfoJson(cuda, cuda_exchange).c_str());
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
    std::printf("ucx: %s\n", cuda_exchange
                                 ? "host and CUDA memory (UCX with CUDA)"
                                 : "host memory only (CUDA fragments "
                                   "staged in pinned host memory)");
  });
}

}  // namespace reshard::cli
