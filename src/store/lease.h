// A lease record held for the duration of a read of a revision (a load,
// an export): Remove refuses a leased revision.

#ifndef RESHARD_STORE_LEASE_H_
#define RESHARD_STORE_LEASE_H_

#include <string>

#include "reshard/sdk/object_store.h"
#include "reshard/weight_store.h"
#include "store/keys.h"
#include "store/records.h"

namespace reshard::internal {

// A lease record held for the duration of a load.
class Lease {
 public:
  static Result<Lease> Take(ObjectStore& b, const RevisionKeys& keys,
                            const WeightStoreOptions& options) {
    const int64_t expires = options.now_seconds() + options.lease_ttl.count();
    Lease l(b, keys.Lease(options.new_lease_id()));
    // Advisory: a lease need not survive a crash (nor does its load).
    const std::string value = LeaseRecord(expires);
    RESHARD_RETURN_NOT_OK(b.PutObject(l.key_, {{value.data(), value.size()}},
                                      Durability::kAtNextSync));
    return l;
  }
  Lease(Lease&& o) noexcept : b_(o.b_), key_(std::move(o.key_)) {
    o.key_.clear();
  }
  ~Lease() {
    if (!key_.empty()) (void)b_.Delete(key_);
  }

 private:
  Lease(ObjectStore& b, std::string key) : b_(b), key_(std::move(key)) {}
  ObjectStore& b_;
  std::string key_;
};

}  // namespace reshard::internal

#endif  // RESHARD_STORE_LEASE_H_
