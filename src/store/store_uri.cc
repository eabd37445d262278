#include "reshard/store_uri.h"

#include "reshard/sdk/backend_registry.h"

namespace reshard {

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(
    std::string_view uri, const OpenObjectStoreOptions& options) {
  RESHARD_ASSIGN_OR_RETURN(const StoreBackend* backend,
                           FindStoreBackend(uri, BackendRole::kStore));
  return backend->open_store(uri,
                             {.create_if_missing = options.create_if_missing});
}

}  // namespace reshard
