// Must not compile with the include roots of the live session: it makes its
// peer exchange by name and sees no implementation, the CUDA IPC one
// included.
#include "live_cuda_ipc/cuda_ipc_exchange.h"
