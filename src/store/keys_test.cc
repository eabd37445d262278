// The store key scheme: every key of a revision built in one place, and
// Classify taking listed keys apart as List, Gc and Remove need.

#include "store/keys.h"

#include <gtest/gtest.h>

namespace reshard::internal {
namespace {

TEST(StoreKeysTest, BuildsEveryKeyOfARevision) {
  const StoreKeys store_keys("weights", "team a");
  const RevisionKeys keys = store_keys.Revision("org/model", ".v1", 3);
  EXPECT_EQ(keys.base(), "weights/team%20a/org%2Fmodel/%2Ev1/3");
  const std::string b = keys.base();
  EXPECT_EQ(keys.Manifest(), b + "/manifest");
  EXPECT_EQ(keys.Payload("t", "f"), b + "/payload/t/f");
  EXPECT_EQ(keys.Checksum("t", "f"), b + "/checksums/t/f");
  EXPECT_EQ(keys.Started("t"), b + "/transactions/t/started");
  EXPECT_EQ(keys.Decision("t"), b + "/transactions/t/decision");
  EXPECT_EQ(keys.PendingManifest("t"), b + "/transactions/t/pending-manifest");
  EXPECT_EQ(keys.Plan("t"), b + "/transactions/t/plan");
  EXPECT_EQ(keys.Receipt("t", "f"), b + "/transactions/t/receipts/f");
  EXPECT_EQ(keys.ReceiptsPrefix("t"), b + "/transactions/t/receipts/");
  EXPECT_EQ(keys.Lease("l"), b + "/leases/l");
  EXPECT_EQ(keys.Leases(), b + "/leases");
  EXPECT_EQ(RevisionKeys::OfManifestKey(keys.Manifest())->base(), b);
  EXPECT_FALSE(RevisionKeys::OfManifestKey(b + "/manifests"));
  EXPECT_FALSE(RevisionKeys::OfManifestKey("/manifest"));
}

TEST(StoreKeysTest, ClassifiesEveryKeyOfARevision) {
  const StoreKeys store_keys("weights", "default");
  const RevisionKeys keys = store_keys.Revision("m", "r", 1);
  struct Case {
    std::string key;
    RevisionKeyKind kind;
    std::string transaction, name;
  };
  for (const Case& c : std::vector<Case>{
           {keys.Manifest(), RevisionKeyKind::kManifest, "", ""},
           {keys.Payload("t", "f"), RevisionKeyKind::kPayload, "t", "f"},
           {keys.Checksum("t", "f"), RevisionKeyKind::kChecksum, "t", "f"},
           {keys.Started("t"), RevisionKeyKind::kStarted, "t", ""},
           {keys.Decision("t"), RevisionKeyKind::kDecision, "t", ""},
           {keys.PendingManifest("t"), RevisionKeyKind::kPendingManifest, "t",
            ""},
           {keys.Plan("t"), RevisionKeyKind::kPlan, "t", ""},
           {keys.Receipt("t", "f"), RevisionKeyKind::kReceipt, "t", "f"},
           {keys.Lease("l"), RevisionKeyKind::kLease, "", "l"},
           // Keys of a family without its exact shape keep their upload.
           {keys.base() + "/payload/t", RevisionKeyKind::kPayload, "t", ""},
           {keys.Transaction("t"), RevisionKeyKind::kTransactionOther, "t", ""},
           {keys.Transaction("t") + "/x", RevisionKeyKind::kTransactionOther,
            "t", ""},
           {keys.base() + "/leases", RevisionKeyKind::kOther, "", ""},
           {keys.base() + "/zz-link", RevisionKeyKind::kOther, "", ""},
       }) {
    SCOPED_TRACE(c.key);
    auto got = store_keys.Classify(c.key);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->kind, c.kind);
    EXPECT_EQ(got->base, keys.base());
    EXPECT_EQ(got->transaction, c.transaction);
    EXPECT_EQ(got->name, c.name);
  }
  for (const std::string outside :
       {"weights", "weights/default/m/r/1", "weights/default/m/r",
        "weightsx/default/m/r/1/manifest", "other/default/m/r/1/manifest"}) {
    EXPECT_FALSE(store_keys.Classify(outside).has_value()) << outside;
  }
}

TEST(StoreKeysTest, StoredFragmentIdsAreTheReferences) {
  // "<tensor>|<offset>|<shape>" with Python tuple rendering.
  EXPECT_EQ(StoredFragmentId("w", {0, 4}, {8}).size(), 24u);
  EXPECT_NE(StoredFragmentId("w", {0, 4}, {8}),
            StoredFragmentId("w", {0, 4}, {8, 1}));
}

}  // namespace
}  // namespace reshard::internal
