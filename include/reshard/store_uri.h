// Opening a store backend by URI, through the backends registered for its
// scheme (backend_registry.h).

#ifndef RESHARD_STORE_URI_H_
#define RESHARD_STORE_URI_H_

#include <memory>
#include <string_view>

#include "reshard/sdk/object_store.h"
#include "reshard/status.h"

namespace reshard {

// The durable object store `uri` names:
//   fs://PATH, or a plain path       files under PATH
//   (reshard/backends/fs_store.h) redis://HOST:PORT[/DB][?...]     a Redis
//   server (reshard/backends/redis_store.h) unix:///PATH/TO.sock[?...]       a
//   Redis server on a unix socket
// and any scheme another backend registered. Any other scheme is
// InvalidArgument naming the URI and listing the registered schemes.
struct OpenObjectStoreOptions {
  // false: a store directory that does not exist is NotFound naming it
  // instead of being created (read-only commands). A Redis server is
  // always there; one without the store's records is an empty store.
  bool create_if_missing = true;
};
Result<std::unique_ptr<ObjectStore>> OpenObjectStore(
    std::string_view uri, const OpenObjectStoreOptions& options = {});

}  // namespace reshard

#endif  // RESHARD_STORE_URI_H_
