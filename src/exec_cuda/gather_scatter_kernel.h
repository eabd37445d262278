// Internal to exec_cuda (CUDA builds): the gather/scatter kernel's launch,
// compiled by nvcc in gather_scatter_kernel.cu.
#ifndef RESHARD_EXEC_CUDA_GATHER_SCATTER_KERNEL_H_
#define RESHARD_EXEC_CUDA_GATHER_SCATTER_KERNEL_H_

#include "exec_cuda/gather_scatter.h"

namespace reshard::cuda {

// Launches GatherScatterThread over GatherScatterBlocks(args) blocks of
// kGatherScatterThreads on `stream` (a cudaStream_t); the launch's
// cudaError_t as an int (0: cudaSuccess).
int LaunchGatherScatterKernel(const GatherScatterArgs& args, void* stream);

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_GATHER_SCATTER_KERNEL_H_
