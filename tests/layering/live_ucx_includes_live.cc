// Must not compile with the include roots of the UCX backend: live sessions
// are above the executor.
#include "reshard/live.h"
