// The live session's rendezvous records and the self-test's report records
// (src/live/live_records.h): records written by other processes. Input:
// the first byte gives the reader's rank (low 3 bits) and the world size
// (rank + 1 + next 3 bits); the rest is the record, fed to every decoder.
// Property: whatever a decoder accepts, its encoder writes back a record
// the decoder reads as the same value (strings up to the recorded limits).

#include "fuzz/fuzz_check.h"
#include "live/live_records.h"

namespace {

using namespace reshard::internal;

bool SameRanges(const std::vector<RemoteRange>& a,
                const std::vector<RemoteRange>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].address != b[i].address || a[i].length != b[i].length ||
        a[i].packed != b[i].packed) {
      return false;
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint32_t rank = data[0] & 7;
  const uint32_t ranks = rank + 1 + ((data[0] >> 3) & 7);
  const std::string_view text = reshard::fuzz::AsView(data + 1, size - 1);
  const std::string key = "session/record/" + std::to_string(rank);

  if (auto r = DecodeRankRecord(text, key, rank, ranks); r.ok()) {
    auto again = DecodeRankRecord(EncodeRankRecord(*r), key, rank, ranks);
    FUZZ_CHECK(again.ok(), "a re-encoded rank record decodes");
    FUZZ_CHECK(again->rank == r->rank && again->ranks == r->ranks,
               "rank record round trip");
    FUZZ_CHECK(r->host.size() > 255 || again->host == r->host,
               "rank record host round trip");
  }
  if (auto a = DecodeAddressRecord(text, key, rank); a.ok()) {
    FUZZ_CHECK(a->size() <= kMaxWorkerAddressBytes, "address bound");
    auto again = DecodeAddressRecord(EncodeAddressRecord(rank, *a), key, rank);
    FUZZ_CHECK(again.ok() && *again == *a, "address record round trip");
  }
  if (auto k = DecodeRemoteKeysRecord(text, key, rank); k.ok()) {
    for (const RemoteRange& r : *k) {
      FUZZ_CHECK(r.length > 0 && r.packed.size() <= kMaxRemoteKeyBytes,
                 "remote key bounds");
      FUZZ_CHECK(r.address + r.length >= r.address, "range does not wrap");
    }
    auto again =
        DecodeRemoteKeysRecord(EncodeRemoteKeysRecord(rank, *k), key, rank);
    FUZZ_CHECK(again.ok() && SameRanges(*again, *k),
               "remote-key record round trip");
  }
  if (DecodeMarkerRecord(text, key, rank).ok()) {
    FUZZ_CHECK(DecodeMarkerRecord(EncodeMarkerRecord(rank), key, rank).ok(),
               "marker round trip");
  }
  if (auto reason = DecodeAbortRecord(text, key, rank); reason.ok()) {
    auto again = DecodeAbortRecord(EncodeAbortRecord(rank, *reason), key, rank);
    FUZZ_CHECK(again.ok(), "a re-encoded abort record decodes");
    FUZZ_CHECK(reason->size() > kMaxRecordedText || *again == *reason,
               "abort reason round trip");
  }
  if (auto r = DecodeReportRecord(text, key, rank); r.ok()) {
    auto again = DecodeReportRecord(EncodeReportRecord(*r), key, rank);
    FUZZ_CHECK(again.ok(), "a re-encoded report decodes");
    FUZZ_CHECK(again->rank == r->rank && again->verified == r->verified &&
                   again->ready == r->ready && again->bytes == r->bytes &&
                   again->operations == r->operations &&
                   again->messages == r->messages &&
                   again->packed_messages == r->packed_messages &&
                   again->plan_ns == r->plan_ns &&
                   again->transfer_ns == r->transfer_ns,
               "report round trip");
    FUZZ_CHECK(r->error.size() > kMaxRecordedText || again->error == r->error,
               "report error round trip");
    FUZZ_CHECK(
        r->mismatch.size() > kMaxRecordedText || again->mismatch == r->mismatch,
        "report mismatch round trip");
  }
  return 0;
}
