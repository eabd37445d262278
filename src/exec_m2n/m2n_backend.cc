#include "exec_m2n/m2n_backend.h"

#include <dlfcn.h>

#include <mutex>
#include <string>

#ifndef RESHARD_M2N_PLUGIN
#define RESHARD_M2N_PLUGIN ""
#endif

namespace reshard::m2n {
namespace {

// Loads the plugin once; its M2nPlugin lives as long as the process.
Result<M2nPlugin*> LoadPlugin() {
  static std::once_flag once;
  static M2nPlugin* plugin = nullptr;
  static std::string error;
  std::call_once(once, [] {
    if (!M2nBuilt()) {
      error =
          "this build has no NCCL M2N backend (configure with the M2N wheel "
          "installed: cmake/m2n.cmake)";
      return;
    }
    void* lib = dlopen(RESHARD_M2N_PLUGIN, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      error = std::string("cannot load the NCCL M2N backend: ") + dlerror();
      return;
    }
    using Entry = M2nPlugin* (*)();
    auto entry = reinterpret_cast<Entry>(dlsym(lib, "ReshardM2nPlugin"));
    if (entry == nullptr) {
      error = std::string("the NCCL M2N backend ") + RESHARD_M2N_PLUGIN +
              " has no ReshardM2nPlugin";
      return;
    }
    plugin = entry();
  });
  if (plugin == nullptr) return Status::Unavailable(error);
  return plugin;
}

Status FromPlugin(const std::string& error) {
  return error.empty() ? Status::OK() : Status::Internal(error);
}

}  // namespace

bool M2nBuilt() { return std::string(RESHARD_M2N_PLUGIN) != ""; }

std::string M2nPluginPath() { return RESHARD_M2N_PLUGIN; }

Status M2nUsable() {
  RESHARD_ASSIGN_OR_RETURN(M2nPlugin * plugin, LoadPlugin());
  const std::string why = plugin->Check();
  return why.empty() ? Status::OK() : Status::Unavailable(why);
}

Result<std::unique_ptr<M2nBackend>> M2nBackend::Open(void* comm, int device) {
  RESHARD_ASSIGN_OR_RETURN(M2nPlugin * plugin, LoadPlugin());
  void* session = nullptr;
  RESHARD_RETURN_NOT_OK(FromPlugin(plugin->Open(comm, device, &session)));
  return std::unique_ptr<M2nBackend>(new M2nBackend(plugin, session));
}

Result<std::unique_ptr<M2nBackend>> M2nBackend::Make(void* nccl_comm) {
  if (nccl_comm == nullptr) {
    return Status::InvalidArgument("M2nBackend::Make: null communicator");
  }
  return Open(nccl_comm, -1);
}

Result<std::unique_ptr<M2nBackend>> M2nBackend::MakeSingleRank(int device) {
  return Open(nullptr, device);
}

M2nBackend::~M2nBackend() { plugin_->Close(session_); }

std::string M2nBackend::Version() const { return plugin_->Version(); }

Status M2nBackend::Run(const std::vector<M2nTensor>& tensors,
                       const std::vector<M2nBuffers>& buffers, void* stream) {
  if (tensors.size() != buffers.size()) {
    return Status::InvalidArgument(
        "M2nBackend::Run: " + std::to_string(tensors.size()) + " tensors but " +
        std::to_string(buffers.size()) + " buffer pairs");
  }
  return FromPlugin(plugin_->Run(session_, tensors, buffers, stream));
}

Result<bool> M2nBackend::Query(void* stream) {
  bool done = false;
  RESHARD_RETURN_NOT_OK(FromPlugin(plugin_->Query(stream, &done)));
  return done;
}

Status M2nBackend::Synchronize(void* stream) {
  return FromPlugin(plugin_->Synchronize(stream));
}

}  // namespace reshard::m2n
