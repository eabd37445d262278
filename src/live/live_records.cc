#include "live/live_records.h"

#include <simdjson.h>

#include <algorithm>

#include "util/canonical_json.h"
#include "util/json_reader.h"
#include "util/sha256.h"

namespace reshard::internal {
namespace {

constexpr char kHex[] = "0123456789abcdef";
// What a reader keeps of a recorded text: a writer's shortened text and
// its "... (N bytes)" suffix fit.
constexpr size_t kMaxReadText = kMaxRecordedText + 64;

std::string ToHex(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

int HexDigit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

// Valid UTF-8 for the canonical writer: when `text` is not, every byte
// outside ASCII becomes '?'.
std::string ValidUtf8(std::string_view text) {
  std::string out(text);
  if (!simdjson::validate_utf8(out.data(), out.size())) {
    for (char& c : out) {
      if (static_cast<unsigned char>(c) >= 0x80) c = '?';
    }
  }
  return out;
}

// A parsed record; `what` ("address record of rank 1 (s/address/1)") is
// the context of every error.
struct Parsed {
  JsonDocument doc;
  WideStrictObject obj;
};

std::string What(std::string_view kind, std::string_view key) {
  return "malformed " + std::string(kind) + " record " + std::string(key);
}

Result<Parsed> Parse(std::string_view text, std::string_view kind,
                     std::string_view key,
                     std::initializer_list<std::string_view> fields) {
  auto doc = JsonDocument::Parse(text);
  if (!doc.ok()) return doc.status().WithContext(What(kind, key));
  const JsonPath root;
  auto obj = WideStrictObject::Make(doc->root(), root,
                                    std::string(kind) + " record", fields);
  if (!obj.ok()) return obj.status().WithContext(What(kind, key));
  return Parsed{std::move(doc).ValueOrDie(), std::move(obj).ValueOrDie()};
}

// A 64-bit hash as recorded: 16 lowercase hex digits.
std::string HashText(uint64_t hash) {
  std::string out(16, '0');
  for (int i = 15; i >= 0; --i, hash >>= 4) out[i] = kHex[hash & 15];
  return out;
}

Result<uint64_t> HashField(const WideStrictObject& obj, std::string_view name,
                           std::string_view kind, std::string_view key) {
  auto text = obj.String(name);
  if (!text.ok()) return text.status().WithContext(What(kind, key));
  uint64_t out = 0;
  bool ok = text->size() == 16;
  for (char c : *text) {
    const int d = HexDigit(c);
    ok = ok && d >= 0;
    out = (out << 4) | static_cast<uint64_t>(d < 0 ? 0 : d);
  }
  if (!ok) {
    return Status::InvalidArgument(What(kind, key) + ": " + std::string(name) +
                                   " is not 16 lowercase hex digits");
  }
  return out;
}

// Checks the "rank" field against the rank in the record's key.
Status CheckRank(const WideStrictObject& obj, std::string_view kind,
                 std::string_view key, uint32_t rank) {
  auto r = obj.U64("rank");
  if (!r.ok()) return r.status().WithContext(What(kind, key));
  if (*r != rank) {
    return Status::InvalidArgument(
        What(kind, key) + ": rank " + std::to_string(*r) +
        " under the key of rank " + std::to_string(rank));
  }
  return Status::OK();
}

Result<uint64_t> U64Field(const WideStrictObject& obj, std::string_view field,
                          std::string_view kind, std::string_view key) {
  const JsonPath root;
  auto v = ReadU64(obj.Get(field), root.Field(field));
  if (!v.ok()) return v.status().WithContext(What(kind, key));
  return *v;
}

Result<std::string> StringField(const WideStrictObject& obj,
                                std::string_view field, std::string_view kind,
                                std::string_view key) {
  const JsonPath root;
  auto v = ReadString(obj.Get(field), root.Field(field));
  if (!v.ok()) return v.status().WithContext(What(kind, key));
  return std::string(*v);
}

Result<bool> BoolField(const WideStrictObject& obj, std::string_view field,
                       std::string_view kind, std::string_view key) {
  const JsonPath root;
  auto v = ReadBool(obj.Get(field), root.Field(field));
  if (!v.ok()) return v.status().WithContext(What(kind, key));
  return *v;
}

// Hex-encoded bytes with their SHA-256: decodes `hex` (lowercase, at most
// `limit` bytes) and checks it against `sha256` (hex).
Result<std::string> DecodeCheckedHex(std::string_view hex,
                                     std::string_view sha256, size_t limit,
                                     const std::string& field,
                                     std::string_view kind,
                                     std::string_view key) {
  if (hex.empty() || hex.size() % 2 != 0 || hex.size() / 2 > limit) {
    return Status::InvalidArgument(What(kind, key) + ": " + field +
                                   " must be 1 to " + std::to_string(limit) +
                                   " bytes of lowercase hex, got " +
                                   std::to_string(hex.size()) + " characters");
  }
  std::string bytes(hex.size() / 2, '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const int hi = HexDigit(hex[2 * i]), lo = HexDigit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return Status::InvalidArgument(What(kind, key) + ": " + field +
                                     " must be lowercase hex");
    }
    bytes[i] = static_cast<char>(hi << 4 | lo);
  }
  if (Sha256Hex(bytes) != sha256) {
    return Status::DataLoss(What(kind, key) + ": " + field +
                            " does not match its sha256 (torn or altered "
                            "record)");
  }
  return bytes;
}

}  // namespace

std::string Shorten(std::string_view text, size_t limit) {
  if (text.size() <= limit) return std::string(text);
  size_t cut = limit;
  // Back up to the first byte of a UTF-8 character.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) {
    --cut;
  }
  return std::string(text.substr(0, cut)) + "... (" +
         std::to_string(text.size()) + " bytes)";
}

std::string EncodeRankRecord(const RankRecord& record) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("host", ValidUtf8(Shorten(record.host, 255)));
  w.KeyUInt("incarnation", record.incarnation);
  w.KeyUInt("rank", record.rank);
  w.KeyUInt("ranks", record.ranks);
  w.EndObject();
  return out;
}

Result<RankRecord> DecodeRankRecord(std::string_view text, std::string_view key,
                                    uint32_t rank, uint32_t ranks) {
  constexpr std::string_view kKind = "rank";
  RESHARD_ASSIGN_OR_RETURN(
      auto p,
      Parse(text, kKind, key, {"host", "incarnation", "rank", "ranks"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  RankRecord r;
  r.rank = rank;
  RESHARD_ASSIGN_OR_RETURN(r.host, StringField(p.obj, "host", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.incarnation,
                           U64Field(p.obj, "incarnation", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(uint64_t n, U64Field(p.obj, "ranks", kKind, key));
  if (n != ranks) {
    return Status::InvalidArgument(
        "rank " + std::to_string(rank) + " joined with " + std::to_string(n) +
        " ranks, this rank with " + std::to_string(ranks) + " (" +
        std::string(key) + ")");
  }
  r.ranks = ranks;
  return r;
}

std::string EncodeAddressRecord(uint32_t rank, std::string_view address) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("address", ToHex(address));
  w.KeyUInt("rank", rank);
  w.KeyString("sha256", Sha256Hex(address));
  w.EndObject();
  return out;
}

Result<std::string> DecodeAddressRecord(std::string_view text,
                                        std::string_view key, uint32_t rank) {
  constexpr std::string_view kKind = "address";
  RESHARD_ASSIGN_OR_RETURN(
      auto p, Parse(text, kKind, key, {"address", "rank", "sha256"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  RESHARD_ASSIGN_OR_RETURN(std::string hex,
                           StringField(p.obj, "address", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(std::string sha256,
                           StringField(p.obj, "sha256", kKind, key));
  return DecodeCheckedHex(hex, sha256, kMaxWorkerAddressBytes, "address", kKind,
                          key);
}

std::string EncodeRemoteKeysRecord(uint32_t rank,
                                   const std::vector<RemoteRange>& ranges) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("keys");
  w.BeginArray();
  for (const RemoteRange& r : ranges) {
    w.BeginObject();
    w.KeyUInt("address", r.address);
    w.KeyString("key", ToHex(r.packed));
    w.KeyUInt("length", r.length);
    w.KeyString("sha256", Sha256Hex(r.packed));
    w.EndObject();
  }
  w.EndArray();
  w.KeyUInt("rank", rank);
  w.EndObject();
  return out;
}

Result<std::vector<RemoteRange>> DecodeRemoteKeysRecord(std::string_view text,
                                                        std::string_view key,
                                                        uint32_t rank) {
  constexpr std::string_view kKind = "remote-key";
  RESHARD_ASSIGN_OR_RETURN(auto p, Parse(text, kKind, key, {"keys", "rank"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  const JsonPath root;
  const JsonPath keys_path = root.Field("keys");
  auto keys = ReadArray(p.obj.Get("keys"), keys_path);
  if (!keys.ok()) return keys.status().WithContext(What(kKind, key));
  std::vector<RemoteRange> out;
  size_t i = 0;
  for (JsonElement e : *keys) {
    const JsonPath at = keys_path.Index(i++);
    auto entry = WideStrictObject::Make(e, at, "remote key",
                                        {"address", "key", "length", "sha256"});
    if (!entry.ok()) return entry.status().WithContext(What(kKind, key));
    RemoteRange r;
    auto address = entry->U64("address");
    auto length = entry->U64("length");
    auto hex = entry->String("key");
    auto sha256 = entry->String("sha256");
    for (const Status& st :
         {address.status(), length.status(), hex.status(), sha256.status()}) {
      if (!st.ok()) return st.WithContext(What(kKind, key));
    }
    r.address = *address;
    r.length = *length;
    if (r.length == 0 || r.address + r.length < r.address) {
      return Status::InvalidArgument(What(kKind, key) + ": " + at.ToString() +
                                     " is an empty or wrapping range");
    }
    RESHARD_ASSIGN_OR_RETURN(
        r.packed, DecodeCheckedHex(*hex, *sha256, kMaxRemoteKeyBytes,
                                   at.ToString() + ".key", kKind, key));
    out.push_back(std::move(r));
  }
  std::sort(out.begin(), out.end(),
            [](const auto& a, const auto& b) { return a.address < b.address; });
  for (size_t j = 1; j < out.size(); ++j) {
    if (out[j - 1].address + out[j - 1].length > out[j].address) {
      return Status::InvalidArgument(What(kKind, key) +
                                     ": registered ranges overlap");
    }
  }
  return out;
}

std::string EncodeMarkerRecord(uint32_t rank) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyUInt("rank", rank);
  w.EndObject();
  return out;
}

Status DecodeMarkerRecord(std::string_view text, std::string_view key,
                          uint32_t rank) {
  constexpr std::string_view kKind = "marker";
  RESHARD_ASSIGN_OR_RETURN(auto p, Parse(text, kKind, key, {"rank"}));
  return CheckRank(p.obj, kKind, key, rank);
}

std::string EncodeDoneRecord(const DoneRecord& record) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("digest", HashText(record.digest));
  w.KeyUInt("rank", record.rank);
  w.KeyUInt("verified", record.verified);
  w.EndObject();
  return out;
}

Result<DoneRecord> DecodeDoneRecord(std::string_view text, std::string_view key,
                                    uint32_t rank) {
  constexpr std::string_view kKind = "done";
  RESHARD_ASSIGN_OR_RETURN(
      auto p, Parse(text, kKind, key, {"digest", "rank", "verified"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  DoneRecord out;
  out.rank = rank;
  RESHARD_ASSIGN_OR_RETURN(out.digest, HashField(p.obj, "digest", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(out.verified,
                           U64Field(p.obj, "verified", kKind, key));
  return out;
}

Status CheckVersionTag(std::string_view tag) {
  if (tag.size() > kMaxVersionTagBytes) {
    return Status::InvalidArgument(
        "version tag of " + std::to_string(tag.size()) + " bytes (at most " +
        std::to_string(kMaxVersionTagBytes) + ")");
  }
  for (size_t i = 0; i < tag.size(); ++i) {
    const auto c = static_cast<unsigned char>(tag[i]);
    if (c < 0x20 || c == 0x7f) {
      return Status::InvalidArgument("version tag holds control character " +
                                     std::to_string(c) + " at byte " +
                                     std::to_string(i));
    }
  }
  if (!simdjson::validate_utf8(tag.data(), tag.size())) {
    return Status::InvalidArgument("version tag is not valid UTF-8");
  }
  return Status::OK();
}

std::string EncodeFencedRecord(const FencedRecord& record) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyUInt("base", record.base);
  w.KeyUInt("incarnation", record.incarnation);
  w.KeyUInt("rank", record.rank);
  w.KeyString("tag", record.tag);
  w.EndObject();
  return out;
}

Result<FencedRecord> DecodeFencedRecord(std::string_view text,
                                        std::string_view key, uint32_t rank) {
  constexpr std::string_view kKind = "fenced";
  RESHARD_ASSIGN_OR_RETURN(
      auto p, Parse(text, kKind, key, {"base", "incarnation", "rank", "tag"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  FencedRecord out;
  out.rank = rank;
  RESHARD_ASSIGN_OR_RETURN(out.base, U64Field(p.obj, "base", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(out.incarnation,
                           U64Field(p.obj, "incarnation", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(out.tag, StringField(p.obj, "tag", kKind, key));
  Status tag = CheckVersionTag(out.tag);
  if (!tag.ok()) return tag.WithContext(What(kKind, key));
  return out;
}

std::string EncodeVersionRecord(const VersionRecord& record) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyString("digest", HashText(record.version.digest));
  w.KeyUInt("generation", record.version.generation);
  w.KeyUInt("rank", record.rank);
  w.KeyString("source_placement_id",
              ValidUtf8(record.version.source_placement_id));
  w.KeyString("tag", ValidUtf8(record.version.tag));
  w.EndObject();
  return out;
}

Result<VersionRecord> DecodeVersionRecord(std::string_view text,
                                          std::string_view key, uint32_t rank) {
  constexpr std::string_view kKind = "version";
  RESHARD_ASSIGN_OR_RETURN(auto p, Parse(text, kKind, key,
                                         {"digest", "generation", "rank",
                                          "source_placement_id", "tag"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  VersionRecord out;
  out.rank = rank;
  RESHARD_ASSIGN_OR_RETURN(out.version.digest,
                           HashField(p.obj, "digest", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(out.version.generation,
                           U64Field(p.obj, "generation", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(
      out.version.source_placement_id,
      StringField(p.obj, "source_placement_id", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(out.version.tag,
                           StringField(p.obj, "tag", kKind, key));
  Status tag = CheckVersionTag(out.version.tag);
  if (!tag.ok()) return tag.WithContext(What(kKind, key));
  return out;
}

std::string EncodeClosedRecord(const ClosedRecord& record) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.KeyUInt("rank", record.rank);
  w.KeyUInt("updates", record.updates);
  w.EndObject();
  return out;
}

Result<ClosedRecord> DecodeClosedRecord(std::string_view text,
                                        std::string_view key, uint32_t rank) {
  constexpr std::string_view kKind = "closed";
  RESHARD_ASSIGN_OR_RETURN(auto p,
                           Parse(text, kKind, key, {"rank", "updates"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  ClosedRecord out;
  out.rank = rank;
  RESHARD_ASSIGN_OR_RETURN(out.updates, U64Field(p.obj, "updates", kKind, key));
  return out;
}

std::string EncodeAbortRecord(uint32_t rank, std::string_view reason,
                              uint64_t generation, bool final) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("final");
  w.Bool(final);
  w.KeyUInt("generation", generation);
  w.KeyUInt("rank", rank);
  w.KeyString("reason", ValidUtf8(Shorten(reason, kMaxRecordedText)));
  w.EndObject();
  return out;
}

Result<AbortRecord> DecodeAbort(std::string_view text, std::string_view key,
                                uint32_t rank) {
  constexpr std::string_view kKind = "abort";
  RESHARD_ASSIGN_OR_RETURN(
      auto p,
      Parse(text, kKind, key, {"final", "generation", "rank", "reason"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  AbortRecord out;
  out.rank = rank;
  RESHARD_ASSIGN_OR_RETURN(out.final, BoolField(p.obj, "final", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(out.generation,
                           U64Field(p.obj, "generation", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(std::string reason,
                           StringField(p.obj, "reason", kKind, key));
  out.reason = Shorten(reason, kMaxReadText);
  return out;
}

Result<std::string> DecodeAbortRecord(std::string_view text,
                                      std::string_view key, uint32_t rank) {
  RESHARD_ASSIGN_OR_RETURN(AbortRecord record, DecodeAbort(text, key, rank));
  return std::move(record.reason);
}

std::string EncodeOutcomeRecord(const OutcomeRecord& record) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("commit");
  w.Bool(record.commit);
  w.KeyUInt("decided_by", record.decided_by);
  w.KeyString("digest", HashText(record.digest));
  w.KeyString("reason", ValidUtf8(Shorten(record.reason, kMaxRecordedText)));
  w.EndObject();
  return out;
}

Result<OutcomeRecord> DecodeOutcomeRecord(std::string_view text,
                                          std::string_view key,
                                          uint32_t ranks) {
  constexpr std::string_view kKind = "outcome";
  RESHARD_ASSIGN_OR_RETURN(
      auto p,
      Parse(text, kKind, key, {"commit", "decided_by", "digest", "reason"}));
  OutcomeRecord out;
  RESHARD_ASSIGN_OR_RETURN(out.digest, HashField(p.obj, "digest", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(out.commit, BoolField(p.obj, "commit", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(uint64_t by,
                           U64Field(p.obj, "decided_by", kKind, key));
  if (by >= ranks) {
    return Status::InvalidArgument(What(kKind, key) + ": decided_by " +
                                   std::to_string(by) + " names no rank of " +
                                   std::to_string(ranks));
  }
  out.decided_by = static_cast<uint32_t>(by);
  RESHARD_ASSIGN_OR_RETURN(std::string reason,
                           StringField(p.obj, "reason", kKind, key));
  out.reason = Shorten(reason, kMaxReadText);
  if (out.commit != out.reason.empty()) {
    return Status::InvalidArgument(
        What(kKind, key) +
        ": a commit carries no reason and an abort carries one");
  }
  return out;
}

std::string EncodeReportRecord(const ReportRecord& r) {
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("apply_ns");
  w.IntArray(r.apply_ns);
  w.KeyUInt("bytes", r.bytes);
  w.Key("delta_regions");
  w.IntArray(r.delta_regions);
  w.Key("encode_ns");
  w.IntArray(r.encode_ns);
  w.KeyString("error", ValidUtf8(Shorten(r.error, kMaxRecordedText)));
  w.Key("failed_updates");
  w.IntArray(r.failed_updates);
  w.Key("failures");
  w.BeginArray();
  for (const std::string& f : r.failures) {
    w.String(ValidUtf8(Shorten(f, kMaxRecordedText)));
  }
  w.EndArray();
  w.Key("full_regions");
  w.IntArray(r.full_regions);
  w.KeyUInt("messages", r.messages);
  w.KeyString("mismatch", ValidUtf8(Shorten(r.mismatch, kMaxRecordedText)));
  w.KeyUInt("open_ns", r.open_ns);
  w.KeyUInt("opens", r.opens);
  w.KeyUInt("operations", r.operations);
  w.KeyUInt("packed_messages", r.packed_messages);
  w.KeyUInt("plan_ns", r.plan_ns);
  w.KeyUInt("rank", r.rank);
  w.Key("ready");
  w.Bool(r.ready);
  w.KeyUInt("rejoins", r.rejoins);
  w.KeyUInt("snapshot_bytes", r.snapshot_bytes);
  w.KeyUInt("transfer_ns", r.transfer_ns);
  w.Key("update_ns");
  w.IntArray(r.update_ns);
  w.Key("verified");
  w.Bool(r.verified);
  w.Key("verified_regions");
  w.IntArray(r.verified_regions);
  w.Key("verify_ns");
  w.IntArray(r.verify_ns);
  w.Key("wire_bytes");
  w.IntArray(r.wire_bytes);
  w.EndObject();
  return out;
}

Result<ReportRecord> DecodeReportRecord(std::string_view text,
                                        std::string_view key, uint32_t rank) {
  constexpr std::string_view kKind = "report";
  RESHARD_ASSIGN_OR_RETURN(
      auto p,
      Parse(
          text, kKind, key,
          {"apply_ns",   "bytes",           "delta_regions",    "encode_ns",
           "error",      "failed_updates",  "failures",         "full_regions",
           "messages",   "mismatch",        "open_ns",          "opens",
           "operations", "packed_messages", "plan_ns",          "rank",
           "ready",      "rejoins",         "snapshot_bytes",   "transfer_ns",
           "update_ns",  "verified",        "verified_regions", "verify_ns",
           "wire_bytes"}));
  RESHARD_RETURN_NOT_OK(CheckRank(p.obj, kKind, key, rank));
  ReportRecord r;
  r.rank = rank;
  RESHARD_ASSIGN_OR_RETURN(r.bytes, U64Field(p.obj, "bytes", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.messages, U64Field(p.obj, "messages", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.operations,
                           U64Field(p.obj, "operations", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.packed_messages,
                           U64Field(p.obj, "packed_messages", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.plan_ns, U64Field(p.obj, "plan_ns", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.transfer_ns,
                           U64Field(p.obj, "transfer_ns", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.open_ns, U64Field(p.obj, "open_ns", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.snapshot_bytes,
                           U64Field(p.obj, "snapshot_bytes", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.opens, U64Field(p.obj, "opens", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.rejoins, U64Field(p.obj, "rejoins", kKind, key));
  for (auto [name, out] : {std::pair{"update_ns", &r.update_ns},
                           std::pair{"wire_bytes", &r.wire_bytes},
                           std::pair{"delta_regions", &r.delta_regions},
                           std::pair{"full_regions", &r.full_regions},
                           std::pair{"encode_ns", &r.encode_ns},
                           std::pair{"apply_ns", &r.apply_ns},
                           std::pair{"verified_regions", &r.verified_regions},
                           std::pair{"verify_ns", &r.verify_ns},
                           std::pair{"failed_updates", &r.failed_updates}}) {
    auto list = p.obj.IntArray(name);
    if (!list.ok()) return list.status().WithContext(What(kKind, key));
    *out = list->ToVector();
  }
  auto failures = p.obj.StringArray("failures");
  if (!failures.ok()) return failures.status().WithContext(What(kKind, key));
  for (const std::string& f : *failures) {
    r.failures.push_back(Shorten(f, kMaxReadText));
  }
  RESHARD_ASSIGN_OR_RETURN(r.ready, BoolField(p.obj, "ready", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.verified,
                           BoolField(p.obj, "verified", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.error, StringField(p.obj, "error", kKind, key));
  RESHARD_ASSIGN_OR_RETURN(r.mismatch,
                           StringField(p.obj, "mismatch", kKind, key));
  r.error = Shorten(r.error, kMaxReadText);
  r.mismatch = Shorten(r.mismatch, kMaxReadText);
  if (!r.error.empty() && r.verified) {
    return Status::InvalidArgument(What(kKind, key) +
                                   ": verified with an error");
  }
  if (!r.mismatch.empty() && r.verified) {
    return Status::InvalidArgument(What(kKind, key) +
                                   ": verified with a mismatch");
  }
  if (r.failures.size() != r.failed_updates.size()) {
    return Status::InvalidArgument(
        What(kKind, key) + ": " + std::to_string(r.failures.size()) +
        " failures for " + std::to_string(r.failed_updates.size()) +
        " failed updates");
  }
  return r;
}

}  // namespace reshard::internal
