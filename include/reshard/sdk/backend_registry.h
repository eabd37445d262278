// Store and rendezvous backends by URI scheme (backend SDK).
//
// A backend registers its schemes once, from its own folder, at static
// initialisation (RegisterStoreBackend); OpenObjectStore (store_uri.h) and
// OpenRendezvous (live.h) look the scheme of a URI up here, so the weight
// store and the live session depend on this interface only, never on a
// backend. A URI without "://" is a directory: the "fs" scheme's. An
// unknown scheme is refused, listing the registered ones.

#ifndef RESHARD_SDK_BACKEND_REGISTRY_H_
#define RESHARD_SDK_BACKEND_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "reshard/sdk/record_store.h"
#include "reshard/status.h"

namespace reshard {

struct BackendOpenOptions {
  // Object stores: false makes a store that does not exist NotFound
  // instead of creating it (read-only commands).
  bool create_if_missing = true;
};

// What a URI is opened as: a weight store's backend, or a live session's
// rendezvous (atomic records, no durability needed).
enum class BackendRole : uint8_t { kStore, kRendezvous };

// One URI scheme's backend.
struct StoreBackend {
  std::string scheme;  // URIs "<scheme>://...": "fs", "redis", "unix"
  // How its URIs look, as errors list them ("fs://PATH"), per role; an
  // empty rendezvous_usage is `usage`.
  std::string usage;
  std::string rendezvous_usage;
  std::function<Result<std::unique_ptr<ObjectStore>>(
      std::string_view uri, const BackendOpenOptions& options)>
      open_store;
  // Empty when the backend cannot serve as a rendezvous.
  std::function<Result<std::unique_ptr<RecordStore>>(std::string_view uri)>
      open_rendezvous;
};

// Registers `backend`; returns true, so that a backend's folder registers
// itself with `static const bool kRegistered = RegisterStoreBackend(...)`.
// A scheme registered before keeps its first backend.
bool RegisterStoreBackend(StoreBackend backend);

// The backend serving `uri` in `role`, or InvalidArgument `unsupported
// store URI "<uri>" (supported: <usages of the registered schemes>)` (or
// "rendezvous URI"), the URI's password hidden.
Result<const StoreBackend*> FindStoreBackend(std::string_view uri,
                                             BackendRole role);

// The registered schemes, sorted.
std::vector<std::string> RegisteredStoreSchemes();

// `uri` as messages, repr and uri() show it, whatever its scheme and even
// when malformed: everything between "//" and the last '@' is "***",
// except that a well-formed "user:password@" keeps its user
// ("redis://u:***@h:1"). A URI without '@' after "//" is returned as is.
std::string RedactUriPassword(std::string_view uri);

}  // namespace reshard

#endif  // RESHARD_SDK_BACKEND_REGISTRY_H_
