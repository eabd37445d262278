// The small control records of the weight store (docs/store-format.md,
// "Records"): how each is written and how one another process wrote is
// read back. Every record is canonical JSON (sorted keys, compact) with a
// `record_type`, read strictly (exact field set, no duplicate keys, exact
// integers); anything else is DataLoss naming the key, never a default.

#ifndef RESHARD_STORE_RECORDS_H_
#define RESHARD_STORE_RECORDS_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "reshard/status.h"

namespace reshard::internal {

// transactions/<txn>/decision: the reference's decision record, byte for
// byte: {"decision":"commit"|"abort","plan_digest":<hex>,
// "record_type":"weight-upload-decision"}.
enum class UploadDecision { kCommit, kAbort };
std::string_view UploadDecisionName(UploadDecision d);
std::string DecisionRecord(UploadDecision decision,
                           std::string_view plan_digest);
Result<UploadDecision> ParseDecisionRecord(std::string_view text,
                                           std::string_view key);

// transactions/<txn>/started: when PrepareUpload ran (unix seconds), for
// Gc's grace period:
// {"record_type":"weight-upload-started","started_unix_seconds":<int>}.
// Stores written before this record was JSON hold the bare decimal
// seconds; that spelling is still read (strictly: digits only).
std::string StartedRecord(int64_t started_unix_seconds);
Result<int64_t> ParseStartedRecord(std::string_view text, std::string_view key);

// leases/<lease_id>: a load in progress until it expires (unix seconds):
// {"expires_unix_seconds":<int>,"record_type":"weight-load-lease"}.
// The older spelling "expires=<decimal seconds>" is still read.
std::string LeaseRecord(int64_t expires_unix_seconds);
Result<int64_t> ParseLeaseRecord(std::string_view text, std::string_view key);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_RECORDS_H_
