// The small named files of a weight-store revision (a checkpoint's
// config.json, generation config and tokenizer files;
// docs/store-format.md, "Revision files"). They belong to the upload
// transaction that publishes the revision, so they follow its protocol:
// written before the manifest (a crash leaves no revision, or one with all
// of them), checksummed like payloads, kept by Gc with the committed
// transaction and collected with an aborted or losing one, removed by
// Remove with the revision, and read the same way on every backend.
//
//   <base>/payload/<txn>/file-<name>     the file's bytes
//   <base>/checksums/<txn>/file-<name>   their chunk checksums (checksum.h)
//   <base>/transactions/<txn>/files      the index, written last:
//     {"files":[{"name":<name>,"size":<bytes>},...],
//      "record_type":"weight-revision-files"}   (files sorted by name)
//
// A revision whose transaction has no index (imported before revision
// files existed, or without any) has none.

#ifndef RESHARD_STORE_REVISION_FILES_H_
#define RESHARD_STORE_REVISION_FILES_H_

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "reshard/status.h"
#include "reshard/stored_manifest.h"
#include "store/keys.h"

namespace reshard::internal {

// Bounds on what a revision holds and what a reader accepts.
inline constexpr uint64_t kMaxRevisionFileBytes = uint64_t{64} << 20;
inline constexpr uint64_t kMaxRevisionFilesBytes = uint64_t{256} << 20;
inline constexpr size_t kMaxRevisionFiles = 64;
inline constexpr size_t kMaxRevisionFileName = 128;

struct RevisionFile {
  std::string name;
  std::string bytes;
};

struct RevisionFileEntry {
  std::string name;
  uint64_t size = 0;
};

// A file name is 1 to 128 characters of [A-Za-z0-9._-] starting with a
// letter or digit (so no path, no control character, no hidden file);
// anything else is InvalidArgument naming it (escaped).
Status CheckRevisionFileName(std::string_view name);

// The index record of `files` (sorted by name).
std::string RevisionFilesRecord(std::vector<RevisionFileEntry> files);
// Strict: the exact field sets, names valid, sorted and unique, sizes and
// count within the bounds above; anything else is DataLoss
// "malformed revision files record: <key>: <why>".
Result<std::vector<RevisionFileEntry>> ParseRevisionFilesRecord(
    std::string_view text, std::string_view key);

// Writes every file (checksum record, then object) and then the index
// under transaction `txn` of the revision, all create-only and durable at
// the store's next Sync (the one Commit makes). Call between
// PrepareImport/PrepareUpload and Commit. Names must pass
// CheckRevisionFileName, be unique and respect the bounds (InvalidArgument
// otherwise, before anything is written).
Status WriteRevisionFiles(ObjectStore& b, const RevisionKeys& keys,
                          std::string_view txn,
                          const std::vector<RevisionFile>& files,
                          uint64_t chunk_bytes);

// The transaction whose payloads a manifest references (the one that
// published it); DataLoss if they name several or none.
Result<std::string> PublishingTransaction(const StoredWeightManifest& m);

// The index of the published revision `m`; empty when it has none.
Result<std::vector<RevisionFileEntry>> ListRevisionFiles(
    ObjectStore& b, const StoredWeightManifest& m);

// Reads every file of the published revision `m` in name order, each
// verified against its checksum record and its indexed size, and calls
// visit(entry, bytes) for it. DataLoss names the file and key of anything
// missing, short, long or damaged. `chunks_verified`, when given, counts
// the checksum chunks checked.
Status ForEachRevisionFile(ObjectStore& b, const StoredWeightManifest& m,
                           const std::function<Status(const RevisionFileEntry&,
                                                      std::string_view)>& visit,
                           uint64_t* chunks_verified = nullptr);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_REVISION_FILES_H_
