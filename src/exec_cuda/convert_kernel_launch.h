// Internal to exec_cuda (CUDA builds): the launches of the FP8 and delta
// kernels (convert_kernels.h), compiled by nvcc in convert_kernels.cu.
// Each launches every phase of its kernel on `stream` (a cudaStream_t),
// ConvertBlocks(items of the phase) blocks of kConvertThreads, and returns
// the first launch's cudaError_t as an int (0: cudaSuccess).
#ifndef RESHARD_EXEC_CUDA_CONVERT_KERNEL_LAUNCH_H_
#define RESHARD_EXEC_CUDA_CONVERT_KERNEL_LAUNCH_H_

#include "exec_cuda/convert_kernels.h"

namespace reshard::cuda {

int LaunchCastKernel(const CastArgs& args, void* stream);
int LaunchQuantizeE4m3Kernel(const QuantizeArgs& args, void* stream);
int LaunchDequantizeE4m3Kernel(const DequantizeArgs& args, void* stream);
int LaunchDeltaEncodeKernel(const DeltaArgs& args, void* stream);
int LaunchDeltaApplyKernel(const DeltaArgs& args, void* stream);

}  // namespace reshard::cuda

#endif  // RESHARD_EXEC_CUDA_CONVERT_KERNEL_LAUNCH_H_
