// Must not compile with the include roots of the live session: it opens its
// rendezvous through the scheme registry (backend_registry.h).
#include "reshard/backends/redis_store.h"
