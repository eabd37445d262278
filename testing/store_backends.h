// The store backends the weight-store suites run on, each as a fresh empty
// store a test owns: "fs" (a temporary directory, removed afterwards) and
// "redis" (a fresh key prefix on this process's private test server,
// testing/redis_server.h). Also damage that tests inflict on stored bytes,
// done the way each backend keeps them.

#ifndef RESHARD_TESTING_STORE_BACKENDS_H_
#define RESHARD_TESTING_STORE_BACKENDS_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "testing/temp_dir.h"

namespace reshard::testing {

// "fs" and "redis".
std::vector<std::string> StoreBackendNames();

// A fixture parameterized by the backend name; gtest names the cases
// .../fs and .../redis.
class StoreBackendTest : public ::testing::TestWithParam<std::string> {};
std::string StoreBackendCaseName(
    const ::testing::TestParamInfo<std::string>& info);

class BackendStore {
 public:
  explicit BackendStore(const std::string& backend);
  const std::string& uri() const { return uri_; }
  const std::string& backend_name() const { return backend_name_; }
  // The store, opened once and shared by the test's WeightStores.
  std::shared_ptr<ObjectStore> backend() const { return backend_; }

  // Flips bit 0 of byte `offset` of object `key`, bypassing the store.
  void FlipByte(const std::string& key, uint64_t offset);
  // Cuts object `key` to `size` bytes, bypassing the store.
  void Truncate(const std::string& key, uint64_t size);
  // What interrupted writers left behind: ".tmp." files under the root
  // (fs), uploads still registered as pending (redis).
  size_t Temporaries() const;

 private:
  std::string backend_name_;
  std::unique_ptr<TempDir> dir_;  // fs
  std::string prefix_;            // redis
  std::string uri_;
  std::shared_ptr<ObjectStore> backend_;
};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_STORE_BACKENDS_H_
