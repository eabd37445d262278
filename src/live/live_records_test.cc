// The live session's records are input from other processes: each decoder
// accepts exactly what its encoder writes and refuses anything else with
// one error naming the record (the bytes UCX parses are checked in
// live_ucx/ucx_handles_test.cc); the rendezvous URI names a directory or is
// refused.

#include "live/live_records.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "reshard/live.h"
#include "testing/status_testing.h"
#include "testing/temp_dir.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::StatusIs;

TEST(LiveRecordsTest, RoundTrips) {
  const RankRecord rank{"host-a", 1, 3, 7};
  EXPECT_EQ(EncodeRankRecord(rank),
            R"({"host":"host-a","incarnation":7,"rank":1,"ranks":3})");
  ASSERT_OK_AND_ASSIGN(
      auto r, DecodeRankRecord(EncodeRankRecord(rank), "s/rank/1", 1, 3));
  EXPECT_EQ(r.host, "host-a");
  EXPECT_EQ(r.incarnation, 7u);

  const std::string address("\x20\x01\x02\x03\x04\x05\x06\x07\x08\x09", 10);
  ASSERT_OK_AND_ASSIGN(
      auto a,
      DecodeAddressRecord(EncodeAddressRecord(2, address), "s/address/2", 2));
  EXPECT_EQ(a, address);

  const std::vector<RemoteRange> ranges = {
      {4096, 100, std::string("\x01\0\0\0\0\0\0\0\0\0", 10)},
      {1024, 8, std::string("\x13\0\0\0\0\0\0\0\0\0\0\0", 12)}};
  ASSERT_OK_AND_ASSIGN(auto k,
                       DecodeRemoteKeysRecord(EncodeRemoteKeysRecord(0, ranges),
                                              "s/rkeys/0", 0));
  ASSERT_EQ(k.size(), 2u);
  EXPECT_EQ((k)[0].address, 1024u);  // sorted
  EXPECT_EQ((k)[0].packed, ranges[1].packed);
  EXPECT_EQ((k)[1].length, 100u);

  EXPECT_EQ(EncodeMarkerRecord(4), R"({"rank":4})");
  EXPECT_OK(DecodeMarkerRecord(R"({"rank":4})", "s/done/4", 4));

  ASSERT_OK_AND_ASSIGN(
      auto reason, DecodeAbortRecord(EncodeAbortRecord(1, "line one\nline two"),
                                     "s/abort/1", 1));
  EXPECT_EQ(reason, "line one\nline two");

  ReportRecord report;
  report.rank = 1;
  report.verified = true;
  report.ready = true;
  report.bytes = 1 << 20;
  report.operations = 7;
  report.messages = 7;
  report.packed_messages = 2;
  report.plan_ns = 1500;
  report.transfer_ns = 123456789;
  const std::string text = EncodeReportRecord(report);
  EXPECT_EQ(
      text,
      R"({"apply_ns":[],"bytes":1048576,"delta_regions":[],"encode_ns":[],"error":"","failed_updates":[],"failures":[],"full_regions":[],"messages":7,"mismatch":"",)"
      R"("open_ns":0,"opens":0,"operations":7,"packed_messages":2,)"
      R"("plan_ns":1500,"rank":1,"ready":true,"rejoins":0,"snapshot_bytes":0,)"
      R"("transfer_ns":123456789,"update_ns":[],"verified":true,)"
      R"("verified_regions":[],"verify_ns":[],"wire_bytes":[]})");
  ASSERT_OK_AND_ASSIGN(auto back, DecodeReportRecord(text, "s/report/1", 1));
  EXPECT_EQ(back.bytes, report.bytes);
  EXPECT_EQ(back.transfer_ns, report.transfer_ns);
  EXPECT_TRUE(back.verified && back.ready);
  // Delta updates' counters per update and the snapshot size.
  report.delta_regions = {0, 5};
  report.full_regions = {9, 1};
  report.snapshot_bytes = 4096;
  report.encode_ns = {0, 250000};
  report.apply_ns = {0, 125000};
  ASSERT_OK_AND_ASSIGN(
      back, DecodeReportRecord(EncodeReportRecord(report), "s/report/1", 1));
  EXPECT_EQ(back.delta_regions, report.delta_regions);
  EXPECT_EQ(back.full_regions, report.full_regions);
  EXPECT_EQ(back.snapshot_bytes, 4096u);
  EXPECT_EQ(back.encode_ns, report.encode_ns);
  EXPECT_EQ(back.apply_ns, report.apply_ns);
  // Verification, opens, rejoins and the updates that failed.
  report.verified_regions = {16, 0, 16};
  report.verify_ns = {900, 0, 800};
  report.opens = 1;
  report.rejoins = 1;
  report.failed_updates = {2};
  report.failures = {"update 2: DataLoss: region 3 differs"};
  ASSERT_OK_AND_ASSIGN(
      back, DecodeReportRecord(EncodeReportRecord(report), "s/report/1", 1));
  EXPECT_EQ(back.verified_regions, report.verified_regions);
  EXPECT_EQ(back.verify_ns, report.verify_ns);
  EXPECT_EQ(back.opens, 1u);
  EXPECT_EQ(back.rejoins, 1u);
  EXPECT_EQ(back.failed_updates, report.failed_updates);
  EXPECT_EQ(back.failures, report.failures);
}

// The launcher used to read "key=value" lines with stoull: a malformed
// report killed it with an uncaught exception.
TEST(LiveRecordsTest, MalformedReportsAreErrorsNamingTheRecord) {
  const std::string key = "s/report/1";
  const std::string valid = EncodeReportRecord({.rank = 1, .verified = true});
  const struct {
    std::string text;
    std::string message;
  } cases[] = {
      {"verified=1\nbytes=lots\n",
       "malformed report record s/report/1: invalid JSON: "},
      {"", "malformed report record s/report/1: invalid JSON: "},
      {R"({"apply_ns":[],"bytes":"1","delta_regions":[],"encode_ns":[],"error":"","failed_updates":[],"failures":[],"full_regions":[],"messages":0,"mismatch":"","open_ns":0,"opens":0,"operations":0,)"
       R"("packed_messages":0,"plan_ns":0,"rank":1,"ready":false,"rejoins":0,"snapshot_bytes":0,)"
       R"("transfer_ns":0,"update_ns":[],"verified":true,)"
       R"("verified_regions":[],"verify_ns":[],"wire_bytes":[]})",
       "malformed report record s/report/1: bytes must be an integer"},
      {R"({"apply_ns":[],"bytes":-1,"delta_regions":[],"encode_ns":[],"error":"","failed_updates":[],"failures":[],"full_regions":[],"messages":0,"mismatch":"","open_ns":0,"opens":0,"operations":0,)"
       R"("packed_messages":0,"plan_ns":0,"rank":1,"ready":false,"rejoins":0,"snapshot_bytes":0,)"
       R"("transfer_ns":0,"update_ns":[],"verified":true,)"
       R"("verified_regions":[],"verify_ns":[],"wire_bytes":[]})",
       "malformed report record s/report/1: bytes must fit in an unsigned "
       "64-bit integer"},
      {R"({"apply_ns":[],"bytes":0,"delta_regions":[],"encode_ns":[],"error":"","failed_updates":[],"failures":[],"full_regions":[],"messages":0,"mismatch":"","open_ns":0,"opens":0,"operations":0,)"
       R"("packed_messages":0,"plan_ns":0,"rank":1,"ready":false,"rejoins":0,"snapshot_bytes":0,)"
       R"("transfer_ns":0,"update_ns":[],"verified":1,)"
       R"("verified_regions":[],"verify_ns":[],"wire_bytes":[]})",
       "malformed report record s/report/1: verified must be a boolean"},
      {R"({"apply_ns":[],"bytes":0,"delta_regions":[],"encode_ns":[],"error":"","failed_updates":[],"failures":[],"full_regions":[],"messages":0,"mismatch":"","open_ns":0,"opens":0,"operations":0,)"
       R"("packed_messages":0,"plan_ns":0,"rank":0,"ready":false,"rejoins":0,"snapshot_bytes":0,)"
       R"("transfer_ns":0,"update_ns":[],"verified":true,)"
       R"("verified_regions":[],"verify_ns":[],"wire_bytes":[]})",
       "malformed report record s/report/1: rank 0 under the key of rank 1"},
      {R"({"apply_ns":[],"bytes":0,"delta_regions":[],"encode_ns":[],"error":"boom","failed_updates":[],"failures":[],"full_regions":[],)"
       R"("messages":0,"mismatch":"",)"
       R"("open_ns":0,"opens":0,"operations":0,"packed_messages":0,"plan_ns":0,"rank":1,)"
       R"("ready":false,"rejoins":0,"snapshot_bytes":0,"transfer_ns":0,"update_ns":[],)"
       R"("verified":true,)"
       R"("verified_regions":[],"verify_ns":[],"wire_bytes":[]})",
       "malformed report record s/report/1: verified with an error"},
      {R"({"apply_ns":[],"bytes":0,"delta_regions":[],"encode_ns":[],"error":"","failed_updates":[2,3],"failures":["update 2: x"],"full_regions":[],)"
       R"("messages":0,"mismatch":"",)"
       R"("open_ns":0,"opens":1,"operations":0,"packed_messages":0,"plan_ns":0,"rank":1,)"
       R"("ready":false,"rejoins":0,"snapshot_bytes":0,"transfer_ns":0,"update_ns":[],)"
       R"("verified":true,)"
       R"("verified_regions":[],"verify_ns":[],"wire_bytes":[]})",
       "malformed report record s/report/1: 1 failures for 2 failed updates"},
      {valid.substr(0, valid.size() - 1),
       "malformed report record s/report/1: invalid JSON: "},
      {valid.substr(0, valid.size() - 1) + R"(,"extra":0})",
       "malformed report record s/report/1: $: report record schema fields "
       "do not match contract: unknown field \"extra\""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    auto r = DecodeReportRecord(c.text, key, 1);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(r.status().message().substr(0, c.message.size()), c.message);
    EXPECT_EQ(r.status().message().find('\n'), std::string::npos);
  }
}

TEST(LiveRecordsTest, AddressRecordsAreCheckedBeforeUcx) {
  const std::string key = "s/address/1";
  // The raw bytes that used to go straight to ucp_ep_create.
  auto raw = DecodeAddressRecord(std::string(64, '\x02'), key, 1);
  EXPECT_EQ(raw.status().message().substr(0, 48),
            "malformed address record s/address/1: invalid JS");
  // A torn or altered address: the SHA-256 no longer matches.
  std::string text = EncodeAddressRecord(1, std::string(64, '\x20'));
  text[13] = text[13] == '0' ? '1' : '0';
  auto torn = DecodeAddressRecord(text, key, 1);
  EXPECT_THAT(
      torn,
      StatusIs(StatusCode::kDataLoss,
               "malformed address record s/address/1: address does not match "
               "its sha256 (torn or altered record)"));
  auto upper =
      DecodeAddressRecord(R"({"address":"0A","rank":1,"sha256":"x"})", key, 1);
  EXPECT_EQ(upper.status().message(),
            "malformed address record s/address/1: address must be lowercase "
            "hex");
  auto empty =
      DecodeAddressRecord(R"({"address":"","rank":1,"sha256":"x"})", key, 1);
  EXPECT_EQ(empty.status().message(),
            "malformed address record s/address/1: address must be 1 to 65536 "
            "bytes of lowercase hex, got 0 characters");
  auto huge = DecodeAddressRecord(
      EncodeAddressRecord(1, std::string(kMaxWorkerAddressBytes + 1, 'x')), key,
      1);
  EXPECT_EQ(huge.status().message(),
            "malformed address record s/address/1: address must be 1 to 65536 "
            "bytes of lowercase hex, got 131074 characters");
  auto wrong_rank =
      DecodeAddressRecord(EncodeAddressRecord(0, "abcdefghij"), key, 1);
  EXPECT_EQ(wrong_rank.status().message(),
            "malformed address record s/address/1: rank 0 under the key of "
            "rank 1");
}

TEST(LiveRecordsTest, RemoteKeysAreCheckedBeforeUcx) {
  const std::string key = "s/rkeys/0";
  // Packed as UCX 1.13 packs them: md map, memory type, one sized key per
  // memory domain.
  const std::string tcp("\x01\0\0\0\0\0\0\0\0\0", 10);

  auto overlap = DecodeRemoteKeysRecord(
      EncodeRemoteKeysRecord(0, {{1000, 100, tcp}, {1050, 10, tcp}}), key, 0);
  EXPECT_EQ(overlap.status().message(),
            "malformed remote-key record s/rkeys/0: registered ranges overlap");
  auto wrap = DecodeRemoteKeysRecord(
      EncodeRemoteKeysRecord(0, {{~uint64_t{0}, 2, tcp}}), key, 0);
  EXPECT_EQ(wrap.status().message(),
            "malformed remote-key record s/rkeys/0: keys[0] is an empty or "
            "wrapping range");
  // The format this record had before: "<address> <length> <hex>" lines.
  auto lines =
      DecodeRemoteKeysRecord("4096 100 01000000000000000000\n", key, 0);
  EXPECT_EQ(lines.status().message().substr(0, 51),
            "malformed remote-key record s/rkeys/0: invalid JSON");
  std::string text = EncodeRemoteKeysRecord(0, {{1000, 100, tcp}});
  text.replace(text.find("\"key\":\"01"), 9, "\"key\":\"02");
  auto altered = DecodeRemoteKeysRecord(text, key, 0);
  EXPECT_EQ(altered.status().message(),
            "malformed remote-key record s/rkeys/0: keys[0].key does not "
            "match its sha256 (torn or altered record)");
}

TEST(LiveRecordsTest, RankAbortAndMarkerRecords) {
  auto other_world =
      DecodeRankRecord(EncodeRankRecord({"h", 1, 4}), "s/rank/1", 1, 2);
  EXPECT_EQ(other_world.status().message(),
            "rank 1 joined with 4 ranks, this rank with 2 (s/rank/1)");
  auto hostname = DecodeRankRecord("myhost", "s/rank/1", 1, 2);
  EXPECT_EQ(hostname.status().message().substr(0, 45),
            "malformed rank record s/rank/1: invalid JSON:");
  EXPECT_EQ(DecodeMarkerRecord("ok", "s/done/0", 0).message().substr(0, 46),
            "malformed marker record s/done/0: invalid JSON");
  EXPECT_EQ(DecodeMarkerRecord(R"({"rank":1.0})", "s/done/1", 1).message(),
            "malformed marker record s/done/1: rank must be an integer");
  // Reasons are bounded and valid UTF-8 whatever the error held.
  const std::string huge(50 << 20, 'k');
  const std::string record = EncodeAbortRecord(0, huge + "\xff");
  EXPECT_LT(record.size(), 2 * kMaxRecordedText);
  ASSERT_OK_AND_ASSIGN(auto reason, DecodeAbortRecord(record, "s/abort/0", 0));
  EXPECT_EQ(reason,
            std::string(kMaxRecordedText, 'k') + "... (52428801 bytes)");
  EXPECT_EQ(Shorten("a\xc3\xa9", 2), "a... (3 bytes)");
}

// closed/<r> carries the closing rank's count of updates, checked like
// every record.
TEST(LiveRecordsTest, ClosedRecordsCarryTheUpdateCount) {
  EXPECT_EQ(EncodeClosedRecord({3, 7}), R"({"rank":3,"updates":7})");
  ASSERT_OK_AND_ASSIGN(
      auto closed,
      DecodeClosedRecord(R"({"rank":3,"updates":7})", "s/closed/3", 3));
  EXPECT_EQ(closed.rank, 3u);
  EXPECT_EQ(closed.updates, 7u);
  EXPECT_EQ(DecodeClosedRecord(R"({"rank":3,"updates":7})", "s/closed/2", 2)
                .status()
                .message(),
            "malformed closed record s/closed/2: rank 3 under the key of "
            "rank 2");
  EXPECT_EQ(
      DecodeClosedRecord(R"({"rank":1})", "s/closed/1", 1).status().message(),
      "malformed closed record s/closed/1: $: closed record schema "
      "fields do not match contract: missing field \"updates\"");
}

TEST(LiveRecordsTest, RendezvousUriNamesADirectory) {
  testing::TempDir dir("reshard-rendezvous-uri");
  for (const std::string& uri :
       {dir.path() + "/plain", "fs://" + dir.path() + "/fs"}) {
    auto store = OpenRendezvous(uri);
    ASSERT_OK(store) << uri;
    ASSERT_OK((*store)->Put("s/rank/0", "{}"));
  }
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/plain/s/rank/0"));
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/fs/s/rank/0"));
  const struct {
    std::string uri, message;
  } cases[] = {
      {"rediss://h:1",
       "unsupported rendezvous URI \"rediss://h:1\" (supported: fs://PATH or a "
       "directory, redis://HOST:PORT, unix:///PATH)"},
      {"s3://bucket/x",
       "unsupported rendezvous URI \"s3://bucket/x\" (supported: fs://PATH or "
       "a directory, redis://HOST:PORT, unix:///PATH)"},
      {"fs://", "rendezvous URI \"fs://\" names no directory"},
      {"", "rendezvous URI \"\" names no directory"},
  };
  for (const auto& c : cases) {
    auto store = OpenRendezvous(c.uri);
    ASSERT_FALSE(store.ok()) << c.uri;
    EXPECT_THAT(store, StatusIs(StatusCode::kInvalidArgument, c.message));
  }
  EXPECT_FALSE(std::filesystem::exists("redis:"));
}

// The records of verification, retries and versions: exact encodings,
// round trips, and strict refusals naming the record.
TEST(LiveRecordsTest, VotesFencesOutcomesAndVersions) {
  const DoneRecord done{2, 0x0123456789abcdefULL, 17};
  EXPECT_EQ(EncodeDoneRecord(done),
            R"({"digest":"0123456789abcdef","rank":2,"verified":17})");
  ASSERT_OK_AND_ASSIGN(
      auto d, DecodeDoneRecord(EncodeDoneRecord(done), "s/u/3/done/2", 2));
  EXPECT_EQ(d.digest, done.digest);
  EXPECT_EQ(d.verified, 17u);
  EXPECT_THAT(
      DecodeDoneRecord(R"({"digest":"0123456789ABCDEF","rank":2,"verified":1})",
                       "s/u/3/done/2", 2),
      StatusIs(StatusCode::kInvalidArgument,
               "malformed done record s/u/3/done/2: digest is not 16 "
               "lowercase hex digits"));
  EXPECT_THAT(
      DecodeDoneRecord(R"({"rank":2})", "s/u/3/done/2", 2),
      StatusIs(StatusCode::kInvalidArgument,
               ::testing::HasSubstr("malformed done record s/u/3/done/2")));

  const FencedRecord fenced{1, 4, 99, "step-4"};
  EXPECT_EQ(EncodeFencedRecord(fenced),
            R"({"base":4,"incarnation":99,"rank":1,"tag":"step-4"})");
  ASSERT_OK_AND_ASSIGN(auto f, DecodeFencedRecord(EncodeFencedRecord(fenced),
                                                  "s/u/5/fenced/1", 1));
  EXPECT_EQ(f.base, 4u);
  EXPECT_EQ(f.incarnation, 99u);
  EXPECT_EQ(f.tag, "step-4");
  EXPECT_THAT(
      DecodeFencedRecord(
          R"({"base":0,"incarnation":0,"rank":1,"tag":"a\u0007"})",
          "s/u/5/fenced/1", 1),
      StatusIs(StatusCode::kInvalidArgument,
               "malformed fenced record s/u/5/fenced/1: version tag holds "
               "control character 7 at byte 1"));
  EXPECT_THAT(
      DecodeFencedRecord(EncodeFencedRecord(fenced), "s/u/5/fenced/0", 0),
      StatusIs(StatusCode::kInvalidArgument,
               "malformed fenced record s/u/5/fenced/0: rank 1 under "
               "the key of rank 0"));
  EXPECT_THAT(CheckVersionTag(std::string(kMaxVersionTagBytes + 1, 'x')),
              StatusIs(StatusCode::kInvalidArgument,
                       "version tag of 257 bytes (at most 256)"));
  EXPECT_OK(CheckVersionTag(std::string(kMaxVersionTagBytes, 'x')));
  EXPECT_THAT(
      CheckVersionTag("\xff"),
      StatusIs(StatusCode::kInvalidArgument, "version tag is not valid UTF-8"));

  const OutcomeRecord commit{true, 1, "", 0xfedcba9876543210ULL};
  EXPECT_EQ(EncodeOutcomeRecord(commit),
            R"({"commit":true,"decided_by":1,"digest":"fedcba9876543210",)"
            R"("reason":""})");
  ASSERT_OK_AND_ASSIGN(auto o, DecodeOutcomeRecord(EncodeOutcomeRecord(commit),
                                                   "s/u/5/outcome/0", 2));
  EXPECT_EQ(o.digest, commit.digest);

  const VersionRecord version{1, {5, "placement-x", "step-5", 42}};
  EXPECT_EQ(EncodeVersionRecord(version),
            R"({"digest":"000000000000002a","generation":5,"rank":1,)"
            R"("source_placement_id":"placement-x","tag":"step-5"})");
  ASSERT_OK_AND_ASSIGN(auto v, DecodeVersionRecord(EncodeVersionRecord(version),
                                                   "s/version/1", 1));
  EXPECT_EQ(v.version, version.version);
}

}  // namespace
}  // namespace reshard::internal
