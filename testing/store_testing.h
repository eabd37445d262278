// Helpers for tests of the weight store that look at what a revision left
// in the object store.

#ifndef RESHARD_TESTING_STORE_TESTING_H_
#define RESHARD_TESTING_STORE_TESTING_H_

#include <set>
#include <string>

#include "reshard/stored_manifest.h"

namespace reshard::testing {

// The upload transaction of `object_key`, a payload key
// "<group>/payload/<transaction>/..." of `m`.
std::string PayloadTransaction(const StoredWeightManifest& m,
                               const std::string& object_key);

// The keys of a committed revision: its manifest, one payload and one
// checksum record per stored fragment, and its transaction's records
// (started, decision, pending-manifest).
std::set<std::string> CommittedKeys(const StoredWeightManifest& m);

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_STORE_TESTING_H_
