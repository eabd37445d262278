// An ObjectStore (and so a RecordStore) in memory: for tests and fuzz
// targets that exercise store logic without filesystem traffic. It keeps
// the ObjectStore contract (include/reshard/sdk/object_store.h) and passes the
// same conformance suite as the fs backend
// (testing/object_store_conformance.h): create-only, atomic, key syntax
// checked by every method, safe to call from any number of threads. It has
// no temporaries and nothing to sync; a "crash" loses nothing.

#ifndef RESHARD_TESTING_MEMORY_OBJECT_STORE_H_
#define RESHARD_TESTING_MEMORY_OBJECT_STORE_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/sdk/object_store.h"

namespace reshard::testing {

class MemoryObjectStore : public ObjectStore {
 public:
  explicit MemoryObjectStore(std::string uri = "memory://")
      : uri_(std::move(uri)) {}

  Status Put(std::string_view key, std::string_view value) override;
  Result<std::string> Get(std::string_view key) override;
  Result<std::vector<std::string>> List(std::string_view prefix) override;
  Status Delete(std::string_view key) override;
  Status PutObject(std::string_view key, const std::vector<ConstBuffer>& parts,
                   Durability durability = Durability::kDurable) override;
  Status Sync() override { return Status::OK(); }
  Status ReadRanges(const std::vector<ReadRange>& ranges) override;
  Result<uint64_t> ObjectSize(std::string_view key) override;
  Result<uint64_t> RemoveStaleTemporaries(std::chrono::seconds) override {
    return uint64_t{0};
  }
  const std::string& uri() const override { return uri_; }

 private:
  // Validates `key` and inserts `value` unless the key exists.
  Status Insert(std::string_view key, std::string value);

  const std::string uri_;
  mutable std::mutex mu_;
  std::map<std::string, std::string, std::less<>> data_;
};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_MEMORY_OBJECT_STORE_H_
