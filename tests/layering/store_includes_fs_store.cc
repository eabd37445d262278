// Must not compile with the include roots of the weight store: it opens
// backends through the scheme registry (backend_registry.h), never by name.
#include "reshard/backends/fs_store.h"
