#include "testing/store_testing.h"

#include <cstring>

#include "store/keys.h"

namespace reshard::testing {

std::string PayloadTransaction(const StoredWeightManifest& m,
                               const std::string& object_key) {
  const size_t from = m.group_id().size() + std::strlen("/payload/");
  return object_key.substr(from, object_key.find('/', from) - from);
}

std::set<std::string> CommittedKeys(const StoredWeightManifest& m) {
  const internal::RevisionKeys revision(m.group_id());
  std::set<std::string> keys = {m.manifest_key()};
  for (const auto& f : m.fragments()) {
    const std::string txn = PayloadTransaction(m, f.object_key);
    keys.insert(f.object_key);
    keys.insert(revision.Checksum(txn, f.stored_fragment_id));
    keys.insert(revision.Started(txn));
    keys.insert(revision.Decision(txn));
    keys.insert(revision.PendingManifest(txn));
  }
  return keys;
}

}  // namespace reshard::testing
