// The "fs" scheme (and plain directory paths): files under a directory, as
// a weight store's backend (OpenFsObjectStore) or a rendezvous
// (OpenDirectoryRecordStore, published atomically without fsyncs).

#include <string>

#include "reshard/backends/fs_store.h"
#include "reshard/sdk/backend_registry.h"

namespace reshard {
namespace {

// The directory `uri` names ("fs://PATH" or a plain path), or
// InvalidArgument when it names none.
Result<std::string> DirectoryOf(std::string_view uri, std::string_view what) {
  std::string_view path = uri;
  if (path.starts_with("fs://")) path.remove_prefix(5);
  if (path.empty()) {
    return Status::InvalidArgument(std::string(what) + " URI \"" +
                                   RedactUriPassword(uri) +
                                   "\" names no directory");
  }
  return std::string(path);
}

const bool kRegistered =
    RegisterStoreBackend(
        {"fs", "fs://PATH", "fs://PATH or a directory",
         [](std::string_view uri, const BackendOpenOptions& options)
             -> Result<std::unique_ptr<ObjectStore>> {
           RESHARD_ASSIGN_OR_RETURN(std::string dir, DirectoryOf(uri, "store"));
           return OpenFsObjectStore(
               dir, {.create_if_missing = options.create_if_missing});
         },
         [](std::string_view uri) -> Result<std::unique_ptr<RecordStore>> {
           RESHARD_ASSIGN_OR_RETURN(std::string dir,
                                    DirectoryOf(uri, "rendezvous"));
           return OpenDirectoryRecordStore(
               dir, {.durability = Durability::kAtNextSync});
         }})
        .ok();

}  // namespace
}  // namespace reshard
