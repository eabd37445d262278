#include "store/revision_files.h"

#include <algorithm>
#include <set>

#include "store/checksum.h"
#include "util/canonical_json.h"
#include "util/json_reader.h"
#include "util/printable.h"

namespace reshard::internal {
namespace {

constexpr std::string_view kRecordType = "weight-revision-files";
// The index of 64 files of 128-character names is about 11 KB.
constexpr uint64_t kMaxIndexBytes = uint64_t{64} << 10;

std::string ObjectName(std::string_view name) {
  return "file-" + std::string(name);
}

std::string IndexKey(const RevisionKeys& keys, std::string_view txn) {
  return keys.Transaction(txn) + "/files";
}

Status Malformed(std::string_view key, std::string_view why) {
  return Status::DataLoss("malformed revision files record: " +
                          std::string(key) + ": " + std::string(why));
}

// Count, total size, and every name valid and unique.
Status CheckBounds(const std::vector<RevisionFileEntry>& files) {
  if (files.size() > kMaxRevisionFiles) {
    return Status::InvalidArgument(std::to_string(files.size()) +
                                   " revision files, more than " +
                                   std::to_string(kMaxRevisionFiles));
  }
  std::set<std::string_view> seen;
  uint64_t total = 0;
  for (const RevisionFileEntry& f : files) {
    RESHARD_RETURN_NOT_OK(CheckRevisionFileName(f.name));
    if (!seen.insert(f.name).second) {
      return Status::InvalidArgument("revision file " + f.name +
                                     " named twice");
    }
    if (f.size > kMaxRevisionFileBytes) {
      return Status::InvalidArgument(
          "revision file " + f.name + " holds " + std::to_string(f.size) +
          " bytes, more than " + std::to_string(kMaxRevisionFileBytes));
    }
    total += f.size;
  }
  if (total > kMaxRevisionFilesBytes) {
    return Status::InvalidArgument(
        "revision files hold " + std::to_string(total) +
        " bytes together, more than " + std::to_string(kMaxRevisionFilesBytes));
  }
  return Status::OK();
}

// Create-only; an existing record with the same bytes is a retry.
Status PutOnce(ObjectStore& b, const std::string& key,
               const std::string& bytes) {
  Status st =
      b.PutObject(key, {{bytes.data(), bytes.size()}}, Durability::kAtNextSync);
  if (!st.IsAlreadyExists()) return st;
  RESHARD_ASSIGN_OR_RETURN(std::string old, b.Get(key));
  if (old != bytes) {
    return Status::AlreadyExists("revision record exists with other bytes: " +
                                 key);
  }
  return Status::OK();
}

// The file's object read whole and checked against its index entry and
// checksum record.
Result<std::string> ReadVerified(ObjectStore& b, const RevisionKeys& keys,
                                 std::string_view txn,
                                 const RevisionFileEntry& f,
                                 uint64_t* chunks_verified) {
  const std::string key = keys.Payload(txn, ObjectName(f.name));
  const std::string what = "revision file " + f.name + " (object " + key + ")";
  auto size = b.ObjectSize(key);
  if (size.status().IsNotFound()) {
    return Status::DataLoss(what + " is missing");
  }
  RESHARD_RETURN_NOT_OK(size.status());
  if (*size != f.size) {
    return Status::DataLoss(what + " holds " + std::to_string(*size) +
                            " bytes, its index says " + std::to_string(f.size));
  }
  auto record = b.Get(keys.Checksum(txn, ObjectName(f.name)));
  if (record.status().IsNotFound()) {
    return Status::DataLoss(what + " has no checksum record");
  }
  RESHARD_RETURN_NOT_OK(record.status());
  auto sums = ParseChecksumRecord(*record);
  if (!sums.ok()) return sums.status().WithContext(what);
  if (sums->size != f.size) {
    return Status::DataLoss(what + ": its checksum record covers " +
                            std::to_string(sums->size) + " bytes");
  }
  RESHARD_ASSIGN_OR_RETURN(std::string bytes, b.Get(key));
  if (bytes.size() != f.size) {
    return Status::DataLoss(what + " changed size while read");
  }
  uint64_t chunks = 0;
  RESHARD_RETURN_NOT_OK(
      VerifyChunks(*sums, 0, reinterpret_cast<const uint8_t*>(bytes.data()),
                   bytes.size(), key, "file " + f.name, &chunks));
  if (chunks_verified != nullptr) *chunks_verified += chunks;
  return bytes;
}

}  // namespace

Status CheckRevisionFileName(std::string_view name) {
  const auto alnum = [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
           (c >= '0' && c <= '9');
  };
  bool ok =
      !name.empty() && name.size() <= kMaxRevisionFileName && alnum(name[0]);
  for (char c : name) {
    ok = ok && (alnum(c) || c == '.' || c == '_' || c == '-');
  }
  if (ok) return Status::OK();
  return Status::InvalidArgument(
      "revision file name " + Printable(name) +
      " is not 1 to 128 characters of [A-Za-z0-9._-] starting with a letter "
      "or digit");
}

std::string RevisionFilesRecord(std::vector<RevisionFileEntry> files) {
  std::sort(files.begin(), files.end(),
            [](const auto& a, const auto& b) { return a.name < b.name; });
  std::string out;
  CanonicalJsonWriter w(&out);
  w.BeginObject();
  w.Key("files");
  w.BeginArray();
  for (const RevisionFileEntry& f : files) {
    w.BeginObject();
    w.KeyString("name", f.name);
    w.KeyUInt("size", f.size);
    w.EndObject();
  }
  w.EndArray();
  w.KeyString("record_type", kRecordType);
  w.EndObject();
  return out;
}

Result<std::vector<RevisionFileEntry>> ParseRevisionFilesRecord(
    std::string_view text, std::string_view key) {
  auto doc = JsonDocument::Parse(text);
  if (!doc.ok()) return Malformed(key, doc.status().message());
  const JsonPath root;
  auto obj = StrictObject::Make(doc->root(), root, "revision files",
                                {"files", "record_type"});
  if (!obj.ok()) return Malformed(key, obj.status().message());
  auto type = obj->String("record_type");
  if (!type.ok() || *type != kRecordType) {
    return Malformed(key, "record_type is not \"weight-revision-files\"");
  }
  auto array = obj->Array("files");
  if (!array.ok()) return Malformed(key, array.status().message());
  std::vector<RevisionFileEntry> files;
  Status st = array->ForEach([&](JsonElement e, const JsonPath& path) {
    RESHARD_ASSIGN_OR_RETURN(
        auto f, StrictObject::Make(e, path, "revision file", {"name", "size"}));
    RESHARD_ASSIGN_OR_RETURN(std::string_view name, f.String("name"));
    RESHARD_ASSIGN_OR_RETURN(uint64_t size, f.U64("size"));
    if (!files.empty() && !(files.back().name < name)) {
      return Status::InvalidArgument("files are not sorted by name at " +
                                     std::string(name));
    }
    files.push_back({std::string(name), size});
    return Status::OK();
  });
  if (st.ok()) st = CheckBounds(files);
  if (!st.ok()) return Malformed(key, st.message());
  return files;
}

Status WriteRevisionFiles(ObjectStore& b, const RevisionKeys& keys,
                          std::string_view txn,
                          const std::vector<RevisionFile>& files,
                          uint64_t chunk_bytes) {
  std::vector<RevisionFileEntry> index;
  for (const RevisionFile& f : files) {
    index.push_back({f.name, static_cast<uint64_t>(f.bytes.size())});
  }
  RESHARD_RETURN_NOT_OK(CheckBounds(index));
  for (const RevisionFile& f : files) {
    const std::string sums =
        ChecksumRecord(reinterpret_cast<const uint8_t*>(f.bytes.data()),
                       f.bytes.size(), chunk_bytes);
    RESHARD_RETURN_NOT_OK(
        PutOnce(b, keys.Checksum(txn, ObjectName(f.name)), sums));
    Status st = b.PutObject(keys.Payload(txn, ObjectName(f.name)),
                            {{f.bytes.data(), f.bytes.size()}},
                            Durability::kAtNextSync);
    if (!st.ok() && !st.IsAlreadyExists()) return st;
  }
  return PutOnce(b, IndexKey(keys, txn), RevisionFilesRecord(index));
}

Result<std::string> PublishingTransaction(const StoredWeightManifest& m) {
  std::string txn;
  for (const StoredFragment& f : m.fragments()) {
    const std::string t = TransactionOfObject(f.object_key);
    if (t.empty() || (!txn.empty() && t != txn)) {
      return Status::DataLoss("weight manifest " + m.manifest_key() +
                              " names payloads of no single transaction");
    }
    txn = t;
  }
  if (txn.empty()) {
    return Status::DataLoss("weight manifest " + m.manifest_key() +
                            " names no payload");
  }
  return txn;
}

Result<std::vector<RevisionFileEntry>> ListRevisionFiles(
    ObjectStore& b, const StoredWeightManifest& m) {
  RESHARD_ASSIGN_OR_RETURN(std::string txn, PublishingTransaction(m));
  const std::string key = IndexKey(RevisionKeys(m.group_id()), txn);
  auto size = b.ObjectSize(key);
  if (size.status().IsNotFound()) return std::vector<RevisionFileEntry>{};
  RESHARD_RETURN_NOT_OK(size.status());
  if (*size > kMaxIndexBytes) {
    return Malformed(key, "it holds " + std::to_string(*size) +
                              " bytes, more than " +
                              std::to_string(kMaxIndexBytes));
  }
  RESHARD_ASSIGN_OR_RETURN(std::string text, b.Get(key));
  return ParseRevisionFilesRecord(text, key);
}

Status ForEachRevisionFile(ObjectStore& b, const StoredWeightManifest& m,
                           const std::function<Status(const RevisionFileEntry&,
                                                      std::string_view)>& visit,
                           uint64_t* chunks_verified) {
  RESHARD_ASSIGN_OR_RETURN(auto files, ListRevisionFiles(b, m));
  if (files.empty()) return Status::OK();
  RESHARD_ASSIGN_OR_RETURN(std::string txn, PublishingTransaction(m));
  const RevisionKeys keys(m.group_id());
  for (const RevisionFileEntry& f : files) {
    RESHARD_ASSIGN_OR_RETURN(std::string bytes,
                             ReadVerified(b, keys, txn, f, chunks_verified));
    RESHARD_RETURN_NOT_OK(visit(f, bytes));
  }
  return Status::OK();
}

}  // namespace reshard::internal
