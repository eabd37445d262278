// The filesystem backend: records and objects as files under a directory
// (a shared filesystem works too). See src/store_fs/fs_store.cc for how
// publication and confinement work, docs/store-format.md for the layout.

#ifndef RESHARD_BACKENDS_FS_STORE_H_
#define RESHARD_BACKENDS_FS_STORE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "reshard/sdk/object_store.h"
#include "reshard/sdk/record_store.h"
#include "reshard/status.h"

namespace reshard {

// Records as files under `root` (created if missing), one file per key.
// Publication writes a temporary file, fsyncs it, links it to its final
// name without replacing (so racing writers cannot clobber each other, also
// on a shared filesystem with link semantics) and fsyncs the directory.
// Caps of one record read by Get (docs/reliability.md, "Input caps"): a
// larger record is DataLoss "record KEY is larger than N bytes", refused by
// its size before anything is allocated. A live rendezvous holds addresses,
// remote keys, markers and per-participant bindings; a weight store's
// records include its manifests and upload plans (a trillion-parameter
// model's manifest is a few hundred MB).
inline constexpr uint64_t kMaxRendezvousRecordBytes = uint64_t{256} << 20;
inline constexpr uint64_t kMaxStoreRecordBytes = uint64_t{4} << 30;

struct DirectoryRecordStoreOptions {
  // kDurable: a record and its directory are fsynced before Put returns
  // (the weight store's control records). kAtNextSync: published just as
  // atomically, without the fsyncs: a live rendezvous, whose records mean
  // nothing once its processes are gone, and which publishes one record
  // per participant binding.
  Durability durability = Durability::kDurable;
  // The largest record Get reads.
  uint64_t max_record_bytes = kMaxRendezvousRecordBytes;
};
Result<std::unique_ptr<RecordStore>> OpenDirectoryRecordStore(
    const std::string& root, const DirectoryRecordStoreOptions& options = {});

// Objects and records as files under `root`, with durable records. Most
// callers use OpenObjectStore("fs://PATH") (reshard/store_uri.h).
struct FsObjectStoreOptions {
  // A missing `root` is created (with its parents); otherwise it is
  // NotFound "store directory ROOT does not exist" (read-only commands).
  bool create_if_missing = true;
  // The largest record (manifests and upload plans included) Get reads.
  uint64_t max_record_bytes = kMaxStoreRecordBytes;
};
Result<std::unique_ptr<ObjectStore>> OpenFsObjectStore(
    std::string_view root, const FsObjectStoreOptions& options = {});

}  // namespace reshard

#endif  // RESHARD_BACKENDS_FS_STORE_H_
