// The URI scheme registry: the built-in backends registered themselves;
// a new backend is one registration, after which the weight store opens
// its URIs; unknown schemes are refused listing the registered ones.

#include "reshard/sdk/backend_registry.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "reshard/live.h"
#include "reshard/store_uri.h"
#include "reshard/weight_store.h"
#include "testing/children.h"
#include "testing/memory_object_store.h"
#include "testing/must.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;

TEST(BackendRegistryTest, BuiltInBackendsRegisteredThemselves) {
  const auto schemes = RegisteredStoreSchemes();
  for (const char* scheme : {"fs", "redis", "unix"}) {
    EXPECT_THAT(schemes, ::testing::Contains(scheme));
  }
  EXPECT_EQ(Must(FindStoreBackend("/plain/dir", BackendRole::kStore))->scheme,
            "fs");
  EXPECT_EQ(Must(FindStoreBackend("unix:///r.sock", BackendRole::kRendezvous))
                ->scheme,
            "unix");
}

// The one registry template of stores and exchanges: the first
// registration of a name stands, a second is AlreadyExists.
TEST(BackendRegistryTest, NameRegistryRefusesADuplicateName) {
  NameRegistry<int> registry("widget");
  EXPECT_OK(registry.Add("b", 2));
  EXPECT_OK(registry.Add("a", 1));
  EXPECT_THAT(registry.Add("b", 3),
              StatusIs(StatusCode::kAlreadyExists,
                       "widget \"b\" is already registered"));
  EXPECT_THAT(registry.Add("", 4),
              StatusIs(StatusCode::kInvalidArgument,
                       "widget: a registration needs a name"));
  ASSERT_NE(registry.Find("b"), nullptr);
  EXPECT_EQ(*registry.Find("b"), 2);
  EXPECT_EQ(registry.Find("c"), nullptr);
  EXPECT_EQ(registry.Names(), (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(registry.NameList(), "a, b");
  EXPECT_EQ(NameRegistry<int>("empty").NameList(), "none");
}

// In a child process: the registration must not outlive the test (other
// tests state the built-in list).
TEST(BackendRegistryTest, OneRegistrationAddsAScheme) {
  const std::string outcome = ::reshard::testing::InChild([] {
    // A backend that serves weight stores only (no rendezvous).
    const Status added = RegisterStoreBackend(
        {"memtest", "memtest://NAME", "",
         [](std::string_view uri,
            const BackendOpenOptions&) -> Result<std::unique_ptr<ObjectStore>> {
           return std::unique_ptr<ObjectStore>(
               new ::reshard::testing::MemoryObjectStore(std::string(uri)));
         },
         nullptr});
    if (!added.ok()) return "register: " + added.ToString();
    auto store = OpenObjectStore("memtest://a");
    if (!store.ok()) return "open: " + store.status().ToString();
    const bool put = (*store)->Put("k", "v").ok();
    auto got = (*store)->Get("k");
    if (!put || !got.ok() || *got != "v") {
      return std::string("the memory store did not keep a record");
    }
    if (!WeightStore::Open("memtest://b").ok()) {
      return std::string("WeightStore::Open refused memtest://b");
    }
    // Its first registration stands; the second is refused.
    const Status again =
        RegisterStoreBackend({"memtest", "other", "", nullptr, nullptr});
    if (again.ToString() !=
        "AlreadyExists: store scheme \"memtest\" is already registered") {
      return "a second registration: " + again.ToString();
    }
    auto found = FindStoreBackend("memtest://c", BackendRole::kStore);
    if (!found.ok() || (*found)->usage != "memtest://NAME") {
      return std::string("a second registration replaced the first");
    }
    // Not a rendezvous: refused, listing those that are.
    return OpenRendezvous("memtest://a").status().ToString() + "\n" +
           OpenObjectStore("s3://u:secret@bucket/p").status().ToString();
  });
  EXPECT_EQ(outcome,
            "InvalidArgument: unsupported rendezvous URI \"memtest://a\" "
            "(supported: fs://PATH or a directory, redis://HOST:PORT, "
            "unix:///PATH)\n"
            "InvalidArgument: unsupported store URI \"s3://u:***@bucket/p\" "
            "(supported: fs://PATH, memtest://NAME, redis://HOST:PORT, "
            "unix:///PATH)");
}

}  // namespace
}  // namespace reshard
