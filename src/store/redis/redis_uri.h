// Parsing of redis:// and unix:// URIs (include/reshard/redis_store.h).

#ifndef RESHARD_STORE_REDIS_REDIS_URI_H_
#define RESHARD_STORE_REDIS_REDIS_URI_H_

#include <cstdint>
#include <string>
#include <string_view>

#include "reshard/status.h"

namespace reshard::internal {

struct RedisUri {
  // Exactly one of host (with port) or socket_path is set.
  std::string host;
  uint16_t port = 0;
  std::string socket_path;
  std::string user;      // empty: AUTH with the password alone
  std::string password;  // empty: no AUTH
  uint32_t db = 0;
  std::string prefix = "reshard";
  bool require_fsync = true;  // sync=fsync (default) or sync=none
  uint32_t replicas = 0;
  // The URI with the password replaced by "***": what messages show.
  std::string redacted;
};

// Parses `uri`; every error names the offending part, never the password.
Result<RedisUri> ParseRedisUri(std::string_view uri);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_REDIS_REDIS_URI_H_
