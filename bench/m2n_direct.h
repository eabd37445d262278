// The baseline of reshard_bench_m2n: ncclReshard called directly, without
// M2nBackend or its plugin. Built as a module of its own
// (libreshard_bench_m2n_direct.so, only where the NCCL M2N plugin is
// built) against the same wheel, and loaded by the benchmark with dlopen,
// as M2nBackend loads its plugin: nothing else in the benchmark links
// libnccl_m2n.so.

#ifndef RESHARD_BENCH_M2N_DIRECT_H_
#define RESHARD_BENCH_M2N_DIRECT_H_

#include <string>
#include <vector>

#include "exec_m2n/m2n_backend.h"
#include "exec_m2n/m2n_lowering.h"

namespace reshard::bench {

// Each call returns "" or the error in one line.
class DirectM2n {
 public:
  virtual ~DirectM2n() = default;
  // A one-rank communicator on `device` (ncclCommInitAll) and an
  // ncclM2nInit handle.
  virtual std::string Open(int device) = 0;
  // Every tensor's ncclReshard between ncclM2nGroupStart and
  // ncclM2nGroupEnd on the legacy default stream, then that stream's
  // synchronisation. Float32 and uint8 tensors only.
  virtual std::string Run(const std::vector<m2n::M2nTensor>& tensors,
                          const std::vector<m2n::M2nBuffers>& buffers) = 0;
  virtual void Close() = 0;
};

}  // namespace reshard::bench

// The module's entry point (dlsym name "ReshardBenchM2nDirect").
extern "C" reshard::bench::DirectM2n* ReshardBenchM2nDirect();

#endif  // RESHARD_BENCH_M2N_DIRECT_H_
