// Must not compile with the include roots of the live session: it makes its
// peer exchange by name (live/exchange/peer_exchange.h) and sees no
// implementation.
#include "live/ucx/ucx_handles.h"
