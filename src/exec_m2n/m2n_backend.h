// The NCCL M2N backend: lowered tensors (m2n_lowering.h) moved by
// ncclReshard, several in one ncclM2nGroupStart/End.
//
// The calls into NCCL M2N live in a plugin, libreshard_m2n.so, built only
// where CMake finds the M2N wheel and CUDA is on (cmake/m2n.cmake), and
// loaded on first use: libnccl_m2n.so needs the driver (libcuda.so.1), so
// nothing that merely links reshard may need it to start. This header
// names no CUDA or NCCL type: communicators and streams pass as void*.

#ifndef RESHARD_EXEC_M2N_M2N_BACKEND_H_
#define RESHARD_EXEC_M2N_M2N_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "exec_m2n/m2n_lowering.h"
#include "reshard/status.h"

namespace reshard::m2n {

// This rank's device buffers of one lowered tensor, each contiguous
// row-major of its side's local shape; null on a side the rank is not in.
struct M2nBuffers {
  void* source = nullptr;
  void* target = nullptr;
};

// What the plugin implements (m2n_plugin.cc); every call returns "" on
// success, else the error in one line.
class M2nPlugin {
 public:
  virtual ~M2nPlugin() = default;
  // "nccl-m2n 0.2.0, nccl 2.32.6" (the versions compiled against).
  virtual std::string Version() = 0;
  // Whether this process can run NCCL M2N (its NCCL is new enough).
  virtual std::string Check() = 0;
  // A session over `comm` (an ncclComm_t the caller keeps), or, when comm
  // is null, over a one-rank communicator on `device` that the session
  // owns (ncclReshard's one-rank self-copy).
  virtual std::string Open(void* comm, int device, void** session) = 0;
  virtual std::string Run(void* session, const std::vector<M2nTensor>& tensors,
                          const std::vector<M2nBuffers>& buffers,
                          void* stream) = 0;
  // Whether `stream` finished its work (*done), without waiting.
  virtual std::string Query(void* stream, bool* done) = 0;
  virtual std::string Synchronize(void* stream) = 0;
  virtual void Close(void* session) = 0;
};

// Whether this build made the plugin, and where.
bool M2nBuilt();
std::string M2nPluginPath();
// OK when this process can run NCCL M2N: the plugin is built and loads,
// and the process's NCCL is new enough; else why not (Unavailable, one
// line). Loads the plugin the first time.
Status M2nUsable();

class M2nBackend {
 public:
  // Over `nccl_comm`, an ncclComm_t of every rank of both sides.
  static Result<std::unique_ptr<M2nBackend>> Make(void* nccl_comm);
  // Over a one-rank communicator on `device`, owned by the backend.
  static Result<std::unique_ptr<M2nBackend>> MakeSingleRank(int device);
  ~M2nBackend();

  std::string Version() const;
  // Enqueues every tensor on `stream` (a cudaStream_t, null for the
  // default) in one group; every rank calls it with the same tensors in
  // the same order (ncclM2nGroupEnd's collective contract). buffers[i]
  // are this rank's of tensors[i].
  Status Run(const std::vector<M2nTensor>& tensors,
             const std::vector<M2nBuffers>& buffers, void* stream);
  // Whether `stream` finished, without waiting.
  Result<bool> Query(void* stream);
  // Waits for `stream`.
  Status Synchronize(void* stream);

 private:
  M2nBackend(M2nPlugin* plugin, void* session)
      : plugin_(plugin), session_(session) {}
  static Result<std::unique_ptr<M2nBackend>> Open(void* comm, int device);
  M2nPlugin* plugin_;
  void* session_;
};

}  // namespace reshard::m2n

#endif  // RESHARD_EXEC_M2N_M2N_BACKEND_H_
