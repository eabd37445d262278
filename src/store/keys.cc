#include "store/keys.h"

#include <unistd.h>

#include <chrono>
#include <random>

#include "util/sha256.h"

namespace reshard::internal {
namespace {

std::string PyTuple(const Dims& d) {
  std::string out = "(";
  for (size_t i = 0; i < d.size(); ++i) {
    if (i) out += ", ";
    out += std::to_string(d[i]);
  }
  if (d.size() == 1) out += ",";
  return out + ")";
}

std::string Join(std::string_view a, std::string_view b) {
  std::string out;
  out.reserve(a.size() + 1 + b.size());
  out.append(a).append("/").append(b);
  return out;
}

// The first '/'-separated component of `s` and what follows its '/'
// (empty when there is no '/').
std::pair<std::string_view, std::string_view> SplitFirst(std::string_view s) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos) return {s, {}};
  return {s.substr(0, slash), s.substr(slash + 1)};
}

// `rest` is "transactions/<txn>..." with "transactions/" removed.
void ClassifyTransactionRecord(std::string_view rest, ClassifiedKey* out) {
  const auto [txn, record] = SplitFirst(rest);
  out->transaction = std::string(txn);
  out->kind = RevisionKeyKind::kTransactionOther;
  if (record == "started") {
    out->kind = RevisionKeyKind::kStarted;
  } else if (record == "decision") {
    out->kind = RevisionKeyKind::kDecision;
  } else if (record == "pending-manifest") {
    out->kind = RevisionKeyKind::kPendingManifest;
  } else if (record == "plan") {
    out->kind = RevisionKeyKind::kPlan;
  } else if (record.starts_with("receipts/")) {
    out->kind = RevisionKeyKind::kReceipt;
    out->name = std::string(record.substr(9));
  }
}

}  // namespace

std::string QuoteKeyComponent(std::string_view id) {
  static const char* kHex = "0123456789ABCDEF";
  std::string out;
  for (size_t i = 0; i < id.size(); ++i) {
    const auto c = static_cast<unsigned char>(id[i]);
    const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
                      c == '~' || (c == '.' && i > 0);
    if (safe) {
      out += static_cast<char>(c);
    } else {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
  }
  return out;
}

std::string StoredFragmentId(std::string_view tensor_id, const Dims& offset,
                             const Dims& shape) {
  const std::string s =
      std::string(tensor_id) + "|" + PyTuple(offset) + "|" + PyTuple(shape);
  return Sha256Hex(s).substr(0, 24);
}

std::optional<RevisionKeys> RevisionKeys::OfManifestKey(std::string_view key) {
  constexpr std::string_view kSuffix = "/manifest";
  if (!key.ends_with(kSuffix) || key.size() == kSuffix.size()) {
    return std::nullopt;
  }
  return RevisionKeys(std::string(key.substr(0, key.size() - kSuffix.size())));
}

std::string RevisionKeys::Payload(std::string_view txn,
                                  std::string_view fid) const {
  return Join(TransactionFamily("payload", txn), fid);
}

std::string RevisionKeys::Checksum(std::string_view txn,
                                   std::string_view fid) const {
  return Join(TransactionFamily("checksums", txn), fid);
}

std::string RevisionKeys::TransactionFamily(std::string_view family,
                                            std::string_view txn) const {
  return Join(Join(base_, family), txn);
}

std::string RevisionKeys::Started(std::string_view txn) const {
  return Join(Transaction(txn), "started");
}

std::string RevisionKeys::Decision(std::string_view txn) const {
  return Join(Transaction(txn), "decision");
}

std::string RevisionKeys::PendingManifest(std::string_view txn) const {
  return Join(Transaction(txn), "pending-manifest");
}

std::string RevisionKeys::Plan(std::string_view txn) const {
  return Join(Transaction(txn), "plan");
}

std::string RevisionKeys::ReceiptsPrefix(std::string_view txn) const {
  return Join(Transaction(txn), "receipts/");
}

std::string RevisionKeys::Receipt(std::string_view txn,
                                  std::string_view name) const {
  return ReceiptsPrefix(txn) + std::string(name);
}

std::string RevisionKeys::Lease(std::string_view lease_id) const {
  return Join(Leases(), lease_id);
}

std::string StoreKeys::Base(std::string_view resource_id,
                            std::string_view revision,
                            uint64_t weight_generation) const {
  return prefix_ + "/" + QuoteKeyComponent(namespace_) + "/" +
         QuoteKeyComponent(resource_id) + "/" + QuoteKeyComponent(revision) +
         "/" + std::to_string(weight_generation);
}

std::optional<ClassifiedKey> StoreKeys::Classify(std::string_view key) const {
  if (!key.starts_with(prefix_) || key.size() <= prefix_.size() ||
      key[prefix_.size()] != '/') {
    return std::nullopt;
  }
  // Four components (namespace, resource, revision, generation) and a '/'.
  size_t at = prefix_.size();
  for (int i = 0; i < 4; ++i) {
    at = key.find('/', at + 1);
    if (at == std::string_view::npos) return std::nullopt;
  }
  ClassifiedKey out;
  out.base = std::string(key.substr(0, at));
  const std::string_view rest = key.substr(at + 1);
  const auto [family, below] = SplitFirst(rest);
  const bool nested = rest.size() > family.size();  // "<family>/..."
  if (rest == "manifest") {
    out.kind = RevisionKeyKind::kManifest;
  } else if (nested && (family == "payload" || family == "checksums")) {
    out.kind = family == "payload" ? RevisionKeyKind::kPayload
                                   : RevisionKeyKind::kChecksum;
    const auto [txn, name] = SplitFirst(below);
    out.transaction = std::string(txn);
    out.name = std::string(name);
  } else if (nested && family == "transactions") {
    ClassifyTransactionRecord(below, &out);
  } else if (nested && family == "leases") {
    out.kind = RevisionKeyKind::kLease;
    out.name = std::string(below);
  }
  return out;
}

std::string TransactionOfObject(std::string_view object_key) {
  const size_t p = object_key.rfind("/payload/");
  if (p == std::string_view::npos) return "";
  std::string_view rest = object_key.substr(p + 9);
  return std::string(rest.substr(0, rest.find('/')));
}

Result<ChunkSums> ReadChunkSums(ObjectStore& backend, const RevisionKeys& keys,
                                const StoredFragment& fragment) {
  RESHARD_ASSIGN_OR_RETURN(
      auto record,
      backend.Get(keys.Checksum(TransactionOfObject(fragment.object_key),
                                fragment.stored_fragment_id)));
  auto sums = ParseChecksumRecord(record);
  if (!sums.ok()) {
    return sums.status().WithContext("stored fragment " +
                                     fragment.stored_fragment_id);
  }
  return sums;
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string RandomHex(size_t bytes) {
  static thread_local pid_t seeded_in = 0;
  static thread_local std::mt19937_64 rng;
  if (seeded_in != ::getpid()) {
    seeded_in = ::getpid();
    std::random_device rd;
    rng.seed((uint64_t{rd()} << 32) ^ rd() ^ (uint64_t(seeded_in) << 17));
  }
  static const char* kHex = "0123456789abcdef";
  std::string out;
  for (size_t i = 0; i < bytes; ++i) {
    const auto b = static_cast<uint8_t>(rng());
    out += kHex[b >> 4];
    out += kHex[b & 15];
  }
  return out;
}

}  // namespace reshard::internal
