#include "store/records.h"

#include <optional>

#include "util/canonical_json.h"
#include "util/json_reader.h"

namespace reshard::internal {
namespace {

constexpr std::string_view kDecisionType = "weight-upload-decision";
constexpr std::string_view kStartedType = "weight-upload-started";
constexpr std::string_view kLeaseType = "weight-load-lease";

// The key ends the message (tools and tests read it back from there).
Status Malformed(std::string_view what, std::string_view key) {
  return Status::DataLoss("malformed " + std::string(what) +
                          " record: " + std::string(key));
}

// {"<field>":<int>,"record_type":"<type>"}.
std::string TimeRecord(std::string_view field, std::string_view type,
                       int64_t seconds) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  // Sorted keys.
  if (field < "record_type") w.KeyInt(field, seconds);
  w.KeyString("record_type", type);
  if (field > "record_type") w.KeyInt(field, seconds);
  w.EndObject();
  return out;
}

// The older text spelling: `prefix` then 1 to 18 decimal digits (no sign,
// no spaces, no leading zero; 18 digits cannot overflow int64).
std::optional<int64_t> ParseLegacySeconds(std::string_view text,
                                          std::string_view prefix) {
  if (!text.starts_with(prefix)) return std::nullopt;
  text.remove_prefix(prefix.size());
  if (text.empty() || text.size() > 18 || (text.size() > 1 && text[0] == '0')) {
    return std::nullopt;
  }
  int64_t v = 0;
  for (char c : text) {
    if (c < '0' || c > '9') return std::nullopt;
    v = v * 10 + (c - '0');
  }
  return v;
}

Result<int64_t> ParseTimeRecord(std::string_view text, std::string_view field,
                                std::string_view type, std::string_view what,
                                std::string_view key) {
  auto doc = JsonDocument::Parse(text);
  if (!doc.ok()) return Malformed(what, key);
  const JsonPath root;
  auto obj =
      StrictObject::Make(doc->root(), root, what, {field, "record_type"});
  if (!obj.ok()) return Malformed(what, key);
  auto seconds = obj->I64(field);
  auto got_type = obj->String("record_type");
  if (!seconds.ok() || !got_type.ok() || *got_type != type) {
    return Malformed(what, key);
  }
  return *seconds;
}

}  // namespace

std::string_view UploadDecisionName(UploadDecision d) {
  return d == UploadDecision::kCommit ? "commit" : "abort";
}

std::string DecisionRecord(UploadDecision decision,
                           std::string_view plan_digest) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("decision", UploadDecisionName(decision));
  w.KeyString("plan_digest", plan_digest);
  w.KeyString("record_type", kDecisionType);
  w.EndObject();
  return out;
}

Result<UploadDecision> ParseDecisionRecord(std::string_view text,
                                           std::string_view key) {
  const Status malformed = Malformed("upload decision", key);
  auto doc = JsonDocument::Parse(text);
  if (!doc.ok()) return malformed;
  const JsonPath root;
  auto obj = StrictObject::Make(doc->root(), root, "upload decision",
                                {"decision", "plan_digest", "record_type"});
  if (!obj.ok()) return malformed;
  auto decision = obj->String("decision");
  auto type = obj->String("record_type");
  auto digest = obj->String("plan_digest");
  if (!decision.ok() || !type.ok() || !digest.ok() || *type != kDecisionType) {
    return malformed;
  }
  if (*decision == "commit") return UploadDecision::kCommit;
  if (*decision == "abort") return UploadDecision::kAbort;
  return malformed;
}

std::string StartedRecord(int64_t started_unix_seconds) {
  return TimeRecord("started_unix_seconds", kStartedType, started_unix_seconds);
}

Result<int64_t> ParseStartedRecord(std::string_view text,
                                   std::string_view key) {
  if (auto legacy = ParseLegacySeconds(text, "")) return *legacy;
  return ParseTimeRecord(text, "started_unix_seconds", kStartedType,
                         "upload started", key);
}

std::string LeaseRecord(int64_t expires_unix_seconds) {
  return TimeRecord("expires_unix_seconds", kLeaseType, expires_unix_seconds);
}

Result<int64_t> ParseLeaseRecord(std::string_view text, std::string_view key) {
  if (auto legacy = ParseLegacySeconds(text, "expires=")) return *legacy;
  return ParseTimeRecord(text, "expires_unix_seconds", kLeaseType, "load lease",
                         key);
}

}  // namespace reshard::internal
