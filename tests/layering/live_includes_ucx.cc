// Must not compile with the include roots of the live session: it makes its
// peer exchange by name (reshard/sdk/peer_exchange.h) and sees no
// implementation.
#include "live_ucx/ucx_handles.h"
