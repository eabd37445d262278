// Must not compile with the include roots of the live session: the UCX
// exchange's options belong to its backend; the session passes neutral
// settings (PeerExchangeOptions) through unread.
#include "reshard/backends/ucx_options.h"
