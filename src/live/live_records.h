// The records a live session's ranks exchange through the rendezvous, and
// the self-test's report records. Every record is canonical JSON (sorted
// keys, compact) written by one process and read by others, so a reader
// treats it as untrusted input: exact field sets, typed values, the rank
// in the record equal to the rank in its key, bytes for UCX carried as hex
// with their SHA-256 (a torn or garbled record is caught before UCX sees
// it), and every error naming the record's key.

#ifndef RESHARD_LIVE_LIVE_RECORDS_H_
#define RESHARD_LIVE_LIVE_RECORDS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/live.h"
#include "reshard/status.h"

namespace reshard::internal {

// Bounds on bytes handed to UCX. A UCX 1.13 worker address is a few hundred
// bytes (one per transport and device); a packed remote key a few dozen.
inline constexpr size_t kMaxWorkerAddressBytes = 64 * 1024;
inline constexpr size_t kMaxRemoteKeyBytes = 4 * 1024;
// Reasons and error strings longer than this are cut when recorded.
inline constexpr size_t kMaxRecordedText = 4 * 1024;

// rank/<r>: the rank's publication marker, written last. `incarnation`:
// 0 for the process that opened the session, one more for each process
// that rejoined in its place (LiveSessionOptions::rejoin).
// {"host":"...","incarnation":I,"rank":R,"ranks":N}
struct RankRecord {
  std::string host;
  uint32_t rank = 0;
  uint32_t ranks = 0;
  uint64_t incarnation = 0;
};
std::string EncodeRankRecord(const RankRecord& record);
// Also checks that the record's rank is `rank` and its world size `ranks`.
Result<RankRecord> DecodeRankRecord(std::string_view text, std::string_view key,
                                    uint32_t rank, uint32_t ranks);

// address/<r>: the UCX worker address.
// {"address":"<hex>","rank":R,"sha256":"<hex of the address bytes>"}
std::string EncodeAddressRecord(uint32_t rank, std::string_view address);
// The address bytes: at most kMaxWorkerAddressBytes, SHA-256 checked.
Result<std::string> DecodeAddressRecord(std::string_view text,
                                        std::string_view key, uint32_t rank);

// rkeys/<r> (pull): one entry per registered source buffer.
// {"keys":[{"address":A,"key":"<hex>","length":L,"sha256":"<hex>"}...],
//  "rank":R}
struct RemoteRange {
  uint64_t address = 0;
  uint64_t length = 0;
  std::string packed;  // the packed UCX remote key
};
std::string EncodeRemoteKeysRecord(uint32_t rank,
                                   const std::vector<RemoteRange>& ranges);
// The ranges sorted by address; each non-empty, not wrapping around the
// address space, disjoint from the others, with a packed key of at most
// kMaxRemoteKeyBytes whose SHA-256 matches.
Result<std::vector<RemoteRange>> DecodeRemoteKeysRecord(std::string_view text,
                                                        std::string_view key,
                                                        uint32_t rank);

// done/<r> and ready/<r>: {"rank":R}.
std::string EncodeMarkerRecord(uint32_t rank);
Status DecodeMarkerRecord(std::string_view text, std::string_view key,
                          uint32_t rank);

// done/<r> (one-shot) and u/<generation>/done/<r>: the rank's vote that
// everything it received arrived (and was verified: `verified` regions,
// its digest, LiveVerify; 0 and 0 without verification).
// {"digest":"<16 hex>","rank":R,"verified":N}
struct DoneRecord {
  uint32_t rank = 0;
  uint64_t digest = 0;
  uint64_t verified = 0;
};
std::string EncodeDoneRecord(const DoneRecord& record);
Result<DoneRecord> DecodeDoneRecord(std::string_view text, std::string_view key,
                                    uint32_t rank);

// u/<generation>/fenced/<r> (standing session): the rank passed its fence
// and may exchange. `base`: the generation its delta state was last
// delivered at (0: none; an update is a delta update only when every rank
// names the same non-zero base); `incarnation`: which process holds the
// rank (0 the one that opened, counting up with each rejoin); `tag`: the
// caller's version tag for the update ("" when it gave none; the ranks
// that give one must agree).
// {"base":G,"incarnation":I,"rank":R,"tag":"..."}
struct FencedRecord {
  uint32_t rank = 0;
  uint64_t base = 0;
  uint64_t incarnation = 0;
  std::string tag;
};
std::string EncodeFencedRecord(const FencedRecord& record);
Result<FencedRecord> DecodeFencedRecord(std::string_view text,
                                        std::string_view key, uint32_t rank);

// A version tag: at most kMaxVersionTagBytes (live.h) of UTF-8 without control
// characters.
Status CheckVersionTag(std::string_view tag);

// version/<r> (standing session, target ranks): the weights the rank
// serves since its last successful update (LiveVersion).
// {"digest":"<16 hex>","generation":G,"rank":R,"source_placement_id":"...",
//  "tag":"..."}
struct VersionRecord {
  uint32_t rank = 0;
  LiveVersion version;
};
std::string EncodeVersionRecord(const VersionRecord& record);
Result<VersionRecord> DecodeVersionRecord(std::string_view text,
                                          std::string_view key, uint32_t rank);

// closed/<r> (standing session): the rank closed the session after
// `updates` successful updates; a rank still waiting for it in an update
// names it at once instead of waiting out the timeout.
// {"rank":R,"updates":U}
struct ClosedRecord {
  uint32_t rank = 0;
  uint64_t updates = 0;
};
std::string EncodeClosedRecord(const ClosedRecord& record);
// Also checks that the record's rank is `rank`.
Result<ClosedRecord> DecodeClosedRecord(std::string_view text,
                                        std::string_view key, uint32_t rank);

// abort/<r>: {"final":bool,"generation":G,"rank":R,"reason":"..."}; the reason
// is cut at kMaxRecordedText bytes. G is the standing session's update the rank
// failed in (or the last it completed, for an abort between updates); 0
// while opening and in a one-shot run. One per rank and session: a failed
// standing session is over for every rank.
// `final`: the rank gave up for good (LiveSession::Abort,
// AbortLiveSession): the others fail at once instead of waiting up to
// rejoin_timeout for a process to rejoin in its place.
struct AbortRecord {
  uint32_t rank = 0;
  uint64_t generation = 0;
  std::string reason;
  bool final = false;
};
std::string EncodeAbortRecord(uint32_t rank, std::string_view reason,
                              uint64_t generation = 0, bool final = false);
Result<AbortRecord> DecodeAbort(std::string_view text, std::string_view key,
                                uint32_t rank);
// The reason alone.
Result<std::string> DecodeAbortRecord(std::string_view text,
                                      std::string_view key, uint32_t rank);

// outcome/0 (one-shot) and u/<generation>/outcome/0 (standing): how an
// update ended, written create-only by the first rank that can tell
// (every "done" present: commit; a rank that failed before its "done", a
// silent rank or the deadline: abort), and followed by every rank that
// reaches the world barrier, so that all of them end the update alike.
// {"commit":bool,"decided_by":R,"digest":"<16 hex>","reason":"..."}; a commit
// has an empty reason, an abort a non-empty one. Kept under rank 0's key
// component (rank 0 removes it) whoever decided.
struct OutcomeRecord {
  bool commit = false;
  uint32_t decided_by = 0;
  std::string reason;
  // A commit: the update's digest (CombineDigests of the ranks' votes).
  uint64_t digest = 0;
};
std::string EncodeOutcomeRecord(const OutcomeRecord& record);
// Also checks that decided_by is below `ranks`.
Result<OutcomeRecord> DecodeOutcomeRecord(std::string_view text,
                                          std::string_view key, uint32_t ranks);

// report/<r> (self-test): one rank's outcome, written by the rank.
// {"bytes":B,"error":"...","messages":M,"mismatch":"...","open_ns":T,
//  "operations":O,"packed_messages":P,"plan_ns":T,"rank":R,"ready":bool,
//  "transfer_ns":T,"update_ns":[T,...],"verified":bool}
// (plus the per-update arrays below: apply_ns, delta_regions, encode_ns,
// full_regions, wire_bytes).
// `error` is empty when the rank succeeded; `verified` is then true unless
// its targets differ (`mismatch`).
struct ReportRecord {
  uint32_t rank = 0;
  bool verified = false;
  bool ready = false;
  uint64_t bytes = 0;
  uint64_t operations = 0;
  uint64_t messages = 0;
  uint64_t packed_messages = 0;
  uint64_t plan_ns = 0;
  uint64_t transfer_ns = 0;
  // Standing session (selftest --updates): Open, and each Update call.
  uint64_t open_ns = 0;
  std::vector<int64_t> update_ns;
  // Bytes received from other ranks: one entry per update (one for a
  // single reshard).
  std::vector<int64_t> wire_bytes;
  // Delta updates: regions received as changes and whole, per update, and
  // the rank's snapshot bytes.
  std::vector<int64_t> delta_regions;
  std::vector<int64_t> full_regions;
  // Delta updates: the rank's seconds encoding what it sent and hashing and
  // applying what it received, per update (nanoseconds).
  std::vector<int64_t> encode_ns;
  std::vector<int64_t> apply_ns;
  uint64_t snapshot_bytes = 0;
  // Regions verified on arrival and the rank's nanoseconds verifying, per
  // update (one entry for a single reshard).
  std::vector<int64_t> verified_regions;
  std::vector<int64_t> verify_ns;
  // Standing session: Open calls without rejoin (0 for a process that
  // rejoined), ranks the rank saw rejoin, and the updates that failed with
  // the session still usable: their generations and "update G: <error>".
  uint64_t opens = 0;
  uint64_t rejoins = 0;
  std::vector<int64_t> failed_updates;
  std::vector<std::string> failures;
  std::string mismatch;
  std::string error;
};
std::string EncodeReportRecord(const ReportRecord& record);
Result<ReportRecord> DecodeReportRecord(std::string_view text,
                                        std::string_view key, uint32_t rank);

// `text` cut to `limit` bytes (at a UTF-8 character boundary) with
// "... (N bytes)" appended when it is longer.
std::string Shorten(std::string_view text, size_t limit);

}  // namespace reshard::internal

#endif  // RESHARD_LIVE_LIVE_RECORDS_H_
