// The conformance suite every ObjectStore backend must pass: multi-part
// create-only publication (exact concatenation, zero-byte objects, 64 MiB
// objects, durable or not, then Sync), ObjectSize, ReadRanges (many ranges of
// several objects into distinct and unaligned caller buffers, zero-length,
// short and missing ranges), List over objects and records alike, Delete and
// re-Put, the shared key space of objects and records, key validation by every
// method, concurrent writers and readers, and racing writers of one key.
//
// A backend instantiates it with a factory of fresh, empty stores:
//
//   using reshard::testing::ObjectStoreConformance;
//   INSTANTIATE_TEST_SUITE_P(MyBackend, ObjectStoreConformance,
//                            ::testing::Values(MyFactory));

#ifndef RESHARD_TESTING_OBJECT_STORE_CONFORMANCE_H_
#define RESHARD_TESTING_OBJECT_STORE_CONFORMANCE_H_

#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "reshard/sdk/object_store.h"

namespace reshard::testing {

// Each call returns a fresh, empty store (which cleans up after itself when
// destroyed).
using ObjectStoreFactory = std::function<std::unique_ptr<ObjectStore>()>;

class ObjectStoreConformance
    : public ::testing::TestWithParam<ObjectStoreFactory> {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The store under test, fresh from the factory.
  std::unique_ptr<ObjectStore> store_;
};

}  // namespace reshard::testing

#endif  // RESHARD_TESTING_OBJECT_STORE_CONFORMANCE_H_
