// The "redis" and "unix" schemes: a Redis server over TCP or a unix
// socket, as a weight store's backend or a rendezvous (which needs atomic
// publication, not durability).

#include "reshard/backends/redis_store.h"
#include "reshard/sdk/backend_registry.h"

namespace reshard {
namespace {

Result<std::unique_ptr<ObjectStore>> OpenStore(std::string_view uri,
                                               const BackendOpenOptions&) {
  // A server is always there; one without the store's records is an
  // empty store, whatever create_if_missing says.
  return OpenRedisStore(uri);
}

Result<std::unique_ptr<RecordStore>> OpenRendezvous(std::string_view uri) {
  RedisStoreOptions options;
  options.require_durable = false;
  RESHARD_ASSIGN_OR_RETURN(auto store, OpenRedisStore(uri, options));
  return std::unique_ptr<RecordStore>(std::move(store));
}

const bool kRegistered = RegisterStoreBackend({"redis", "redis://HOST:PORT", "",
                                               OpenStore, OpenRendezvous})
                             .ok() &&
                         RegisterStoreBackend({"unix", "unix:///PATH", "",
                                               OpenStore, OpenRendezvous})
                             .ok();

}  // namespace
}  // namespace reshard
