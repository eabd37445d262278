#include "reshard/store_uri.h"

#include <string>

#include "reshard/fs_store.h"
#include "reshard/redis_store.h"

namespace reshard {

Result<std::unique_ptr<ObjectStore>> OpenObjectStore(
    std::string_view uri, const OpenObjectStoreOptions& options) {
  if (IsRedisUri(uri)) return OpenRedisStore(uri);
  std::string_view path = uri;
  if (uri.starts_with("fs://")) {
    path.remove_prefix(5);
  } else if (uri.find("://") != std::string_view::npos) {
    return Status::InvalidArgument(
        "unsupported store URI \"" + RedactUriPassword(uri) +
        "\" (supported: fs://PATH, redis://HOST:PORT, unix:///PATH)");
  }
  if (path.empty()) {
    return Status::InvalidArgument("store URI \"" +
                                   RedactUriPassword(uri) +
                                   "\" names no directory");
  }
  return OpenFsObjectStore(path,
                           {.create_if_missing = options.create_if_missing});
}

}  // namespace reshard
