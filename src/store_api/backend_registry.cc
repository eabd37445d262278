#include "reshard/sdk/backend_registry.h"

#include <utility>

namespace reshard {
namespace {

// Built on first use: backends register from static initialisers of other
// files, in an order nobody controls.
NameRegistry<StoreBackend>& TheRegistry() {
  static auto* registry = new NameRegistry<StoreBackend>("store scheme");
  return *registry;
}

}  // namespace

Status RegisterStoreBackend(StoreBackend backend) {
  std::string scheme = backend.scheme;
  return TheRegistry().Add(std::move(scheme), std::move(backend));
}

Result<const StoreBackend*> FindStoreBackend(std::string_view uri,
                                             BackendRole role) {
  const size_t sep = uri.find("://");
  const std::string_view scheme =
      sep == std::string_view::npos ? "fs" : uri.substr(0, sep);
  const bool rendezvous = role == BackendRole::kRendezvous;
  const StoreBackend* found = TheRegistry().Find(scheme);
  if (found != nullptr && (!rendezvous || found->open_rendezvous)) {
    return found;
  }
  std::string supported;
  for (const auto& [name, entry] : TheRegistry().Entries()) {
    const StoreBackend& b = *entry;
    if (rendezvous && !b.open_rendezvous) continue;
    const std::string& usage = rendezvous && !b.rendezvous_usage.empty()
                                   ? b.rendezvous_usage
                                   : b.usage;
    supported += (supported.empty() ? "" : ", ") + usage;
  }
  return Status::InvalidArgument(
      std::string("unsupported ") + (rendezvous ? "rendezvous" : "store") +
      " URI \"" + RedactUriPassword(uri) + "\" (supported: " +
      (supported.empty() ? "no backend is registered" : supported) + ")");
}

std::vector<std::string> RegisteredStoreSchemes() {
  return TheRegistry().Names();
}

std::string RedactUriPassword(std::string_view uri) {
  const size_t scheme = uri.find("://");
  if (scheme == std::string_view::npos) return std::string(uri);
  const size_t start = scheme + 3;
  const size_t at = uri.rfind('@');
  if (at == std::string_view::npos || at < start) return std::string(uri);
  const std::string_view info = uri.substr(start, at - start);
  const size_t colon = info.find(':');
  // A well-formed "user:password" keeps its user; anything else is hidden
  // whole (an unencoded delimiter makes the user's extent unknown).
  if (colon != std::string_view::npos &&
      info.find_first_of("/?#@") == std::string_view::npos) {
    return std::string(uri.substr(0, start + colon + 1)) + "***" +
           std::string(uri.substr(at));
  }
  return std::string(uri.substr(0, start)) + "***" +
         std::string(uri.substr(at));
}

}  // namespace reshard
