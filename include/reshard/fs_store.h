// The filesystem backend: records and objects as files under a directory
// (a shared filesystem works too). See src/store/fs/fs_store.cc for how
// publication and confinement work, docs/store-format.md for the layout.

#ifndef RESHARD_FS_STORE_H_
#define RESHARD_FS_STORE_H_

#include <memory>
#include <string>
#include <string_view>

#include "reshard/object_store.h"
#include "reshard/record_store.h"
#include "reshard/status.h"

namespace reshard {

// Records as files under `root` (created if missing), one file per key.
// Publication writes a temporary file, fsyncs it, links it to its final
// name without replacing (so racing writers cannot clobber each other, also
// on a shared filesystem with link semantics) and fsyncs the directory.
struct DirectoryRecordStoreOptions {
  // kDurable: a record and its directory are fsynced before Put returns
  // (the weight store's control records). kAtNextSync: published just as
  // atomically, without the fsyncs: a live rendezvous, whose records mean
  // nothing once its processes are gone, and which publishes one record
  // per participant binding.
  Durability durability = Durability::kDurable;
};
Result<std::unique_ptr<RecordStore>> OpenDirectoryRecordStore(
    const std::string& root, const DirectoryRecordStoreOptions& options = {});

// Objects and records as files under `root` (created if missing), with
// durable records. Most callers use OpenObjectStore("fs://PATH")
// (reshard/store_uri.h).
Result<std::unique_ptr<ObjectStore>> OpenFsObjectStore(std::string_view root);

}  // namespace reshard

#endif  // RESHARD_FS_STORE_H_
