// The gather/scatter kernel: the __host__ __device__ functions of
// gather_scatter.h, one block per row (grid-stride beyond the grid).
#include <cuda_runtime.h>

#include "exec_cuda/gather_scatter_kernel.h"

namespace reshard::cuda {

namespace {

__global__ void GatherScatterKernel(GatherScatterArgs args) {
  GatherScatterThread(args, blockIdx.x, gridDim.x, threadIdx.x, blockDim.x);
}

}  // namespace

int LaunchGatherScatterKernel(const GatherScatterArgs& args, void* stream) {
  const unsigned blocks = static_cast<unsigned>(GatherScatterBlocks(args));
  GatherScatterKernel<<<blocks, kGatherScatterThreads, 0,
                        static_cast<cudaStream_t>(stream)>>>(args);
  return static_cast<int>(cudaGetLastError());
}

}  // namespace reshard::cuda
