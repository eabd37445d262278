// Backends by name (backend SDK): NameRegistry, the one registry of
// implementations by name, and the store and rendezvous backends by URI
// scheme kept in one.
//
// A backend registers its schemes once, from its own folder, at static
// initialisation (RegisterStoreBackend); OpenObjectStore (store_uri.h) and
// OpenRendezvous (live.h) look the scheme of a URI up here, so the weight
// store and the live session depend on this interface only, never on a
// backend. A URI without "://" is a directory: the "fs" scheme's. An
// unknown scheme is refused, listing the registered ones. Peer exchanges
// (sdk/peer_exchange.h) are registered by name in a NameRegistry too.

#ifndef RESHARD_SDK_BACKEND_REGISTRY_H_
#define RESHARD_SDK_BACKEND_REGISTRY_H_

#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "reshard/sdk/record_store.h"
#include "reshard/status.h"

namespace reshard {

// Entries of one kind by name, registered from static initialisers of
// other files (make the registry a function-local static, built on first
// use). Thread-safe; an entry, once added, stays at the same address for
// the life of the process.
template <typename Entry>
class NameRegistry {
 public:
  // `kind` names the entries in errors: "store scheme", "peer exchange".
  explicit NameRegistry(std::string kind) : kind_(std::move(kind)) {}

  NameRegistry(const NameRegistry&) = delete;
  NameRegistry& operator=(const NameRegistry&) = delete;

  // Adds `entry` as `name`; AlreadyExists `<kind> "<name>" is already
  // registered` when the name is taken (the first registration stands),
  // InvalidArgument for an empty name.
  Status Add(std::string name, Entry entry) {
    if (name.empty()) {
      return Status::InvalidArgument(kind_ + ": a registration needs a name");
    }
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, fresh] = entries_.try_emplace(std::move(name), std::move(entry));
    if (fresh) return Status::OK();
    return Status::AlreadyExists(kind_ + " \"" + it->first +
                                 "\" is already registered");
  }

  // The entry registered as `name`, or nullptr.
  const Entry* Find(std::string_view name) const {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = entries_.find(name);
    return it == entries_.end() ? nullptr : &it->second;
  }

  // Every entry, sorted by name.
  std::vector<std::pair<std::string, const Entry*>> Entries() const {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::pair<std::string, const Entry*>> out;
    for (const auto& [name, entry] : entries_) out.emplace_back(name, &entry);
    return out;
  }

  // The registered names, sorted.
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& [name, entry] : Entries()) out.push_back(name);
    return out;
  }

  // The registered names, sorted, as "a, b, c" ("none" when empty).
  std::string NameList() const {
    std::string out;
    for (const std::string& name : Names()) {
      out += (out.empty() ? "" : ", ") + name;
    }
    return out.empty() ? "none" : out;
  }

 private:
  const std::string kind_;
  mutable std::mutex mu_;
  std::map<std::string, Entry, std::less<>> entries_;
};

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

// Registers `backend` under its scheme; a backend's folder registers
// itself with `static const bool kRegistered =
// RegisterStoreBackend(...).ok()`. A scheme registered before keeps its
// first backend: AlreadyExists `store scheme "<scheme>" is already
// registered`.
Status RegisterStoreBackend(StoreBackend backend);

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
