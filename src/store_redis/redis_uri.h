// Parsing of redis:// and unix:// URIs
// (include/reshard/backends/redis_store.h).

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
  std::string user;  // empty: AUTH with the password alone
  // The URI's password, else $RESHARD_REDIS_PASSWORD; empty: no AUTH.
  std::string password;
  uint32_t db = 0;
  std::string prefix = "reshard";
  bool require_fsync = true;  // sync=fsync (default) or sync=none
  uint32_t replicas = 0;
  // The URI with the password replaced by "***": what messages show.
  std::string redacted;
};

// The environment variable that gives the password when the URI has none
// (so that it never appears in a command line).
inline constexpr const char* kRedisPasswordEnv = "RESHARD_REDIS_PASSWORD";

// Parses `uri`; every error names the offending part, never the password.
// A user or password must percent-encode '/', '?', '#' and '@'.
Result<RedisUri> ParseRedisUri(std::string_view uri);

// `uri` as messages show it (reshard::RedactUriPassword).
std::string RedactUri(std::string_view uri);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_REDIS_REDIS_URI_H_
