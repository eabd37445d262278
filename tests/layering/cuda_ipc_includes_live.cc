// Must not compile with the include roots of the CUDA IPC exchange: it lies
// below the live session, which makes it by name.
#include "reshard/live.h"
