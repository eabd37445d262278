// The in-memory ObjectStore passes the backend conformance suite.

#include "testing/memory_object_store.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "testing/object_store_conformance.h"
#include "testing/status_testing.h"

namespace reshard::testing {
namespace {

INSTANTIATE_TEST_SUITE_P(MemoryObjectStore, ObjectStoreConformance,
                         ::testing::Values(ObjectStoreFactory([] {
                           return std::make_unique<MemoryObjectStore>();
                         })),
                         [](const auto&) { return std::string("memory"); });

TEST(MemoryObjectStoreTest, AKeyIsARecordOrADirectoryNeverBoth) {
  MemoryObjectStore store;
  ASSERT_OK(store.Put("a/b", "x"));
  EXPECT_EQ(store.Put("a", "y").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(store.Put("a/b/c", "z").code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(*store.List(""), std::vector<std::string>{"a/b"});
}

}  // namespace
}  // namespace reshard::testing
