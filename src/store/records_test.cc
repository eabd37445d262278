// The store's control records: exact bytes written, strict reads, and a
// malformed record is DataLoss naming its key (never a crash, never 0).

#include "store/records.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace reshard::internal {
namespace {

constexpr std::string_view kKey = "weights/default/m/r/1/leases/0123";

TEST(StoreRecordsTest, WritesCanonicalJson) {
  EXPECT_EQ(LeaseRecord(1764668400), R"({"expires_unix_seconds":1764668400,)"
                                     R"("record_type":"weight-load-lease"})");
  EXPECT_EQ(StartedRecord(1764582000),
            R"({"record_type":"weight-upload-started",)"
            R"("started_unix_seconds":1764582000})");
  // The reference's decision record, byte for byte.
  EXPECT_EQ(DecisionRecord(UploadDecision::kCommit, "ab"),
            R"({"decision":"commit","plan_digest":"ab",)"
            R"("record_type":"weight-upload-decision"})");
}

TEST(StoreRecordsTest, ReadsWhatItWrites) {
  EXPECT_EQ(*ParseLeaseRecord(LeaseRecord(42), kKey), 42);
  EXPECT_EQ(*ParseLeaseRecord(LeaseRecord(-1), kKey), -1);
  EXPECT_EQ(*ParseStartedRecord(StartedRecord(7), kKey), 7);
  EXPECT_EQ(
      *ParseDecisionRecord(DecisionRecord(UploadDecision::kAbort, "d"), kKey),
      UploadDecision::kAbort);
}

TEST(StoreRecordsTest, ReadsTheOlderTextSpelling) {
  EXPECT_EQ(*ParseLeaseRecord("expires=1764668400", kKey), 1764668400);
  EXPECT_EQ(*ParseStartedRecord("1764582000", kKey), 1764582000);
  EXPECT_EQ(*ParseStartedRecord("0", kKey), 0);
}

void ExpectMalformed(const Status& st, std::string_view what) {
  EXPECT_EQ(st.code(), StatusCode::kDataLoss) << st.ToString();
  EXPECT_EQ(st.message(),
            "malformed " + std::string(what) + " record: " + std::string(kKey));
}

// Regression: lease and started records were "expires=<n>" / "<n>" text
// read with from_chars after the last '=', and anything malformed counted
// as 0 (an expired lease, an ancient upload).
TEST(StoreRecordsTest, MalformedLeaseRecordsAreDataLossNamingTheKey) {
  for (const std::string bad :
       {"",
        "expires=",
        "expires=-5",
        "expires=+5",
        "expires= 5",
        "expires=5 ",
        "expires=05",
        "expires=99999999999999999999",
        "foo=1764668400",
        "1764668400",
        "expires=1x",
        "{}",
        "[]",
        "null",
        R"({"expires_unix_seconds":5})",
        R"({"expires_unix_seconds":5,"record_type":"weight-upload-started"})",
        R"({"expires_unix_seconds":5.5,"record_type":"weight-load-lease"})",
        R"({"expires_unix_seconds":"5","record_type":"weight-load-lease"})",
        R"({"expires_unix_seconds":true,"record_type":"weight-load-lease"})",
        R"({"expires_unix_seconds":18446744073709551615,)"
        R"("record_type":"weight-load-lease"})",
        R"({"expires_unix_seconds":5,"record_type":"weight-load-lease",)"
        R"("x":1})",
        R"({"expires_unix_seconds":5,"expires_unix_seconds":6,)"
        R"("record_type":"weight-load-lease"})",
        R"({"expires_unix_seconds":5,"record_type":"weight-load-lease"} x)"}) {
    SCOPED_TRACE(bad);
    ExpectMalformed(ParseLeaseRecord(bad, kKey).status(), "load lease");
  }
}

TEST(StoreRecordsTest, MalformedStartedRecordsAreDataLossNamingTheKey) {
  for (
      const std::string bad :
      {"", "-1", "+1", " 1", "1 ", "01", "1e9", "1.5", "started=1",
       "9999999999999999999", "{}",
       R"({"record_type":"weight-upload-started"})",
       R"({"record_type":"weight-load-lease","started_unix_seconds":1})",
       R"({"record_type":"weight-upload-started","started_unix_seconds":[1]})"}) {
    SCOPED_TRACE(bad);
    ExpectMalformed(ParseStartedRecord(bad, kKey).status(), "upload started");
  }
}

TEST(StoreRecordsTest, MalformedDecisionRecordsAreDataLossNamingTheKey) {
  for (const std::string bad :
       {"", "commit", R"({"decision":"commit"})",
        R"({"decision":"maybe","plan_digest":"d",)"
        R"("record_type":"weight-upload-decision"})",
        R"({"decision":"commit","plan_digest":1,)"
        R"("record_type":"weight-upload-decision"})",
        R"({"decision":"commit","plan_digest":"d","record_type":"other"})"}) {
    SCOPED_TRACE(bad);
    ExpectMalformed(ParseDecisionRecord(bad, kKey).status(), "upload decision");
  }
}

}  // namespace
}  // namespace reshard::internal
