// The Redis backend: records and objects in a Redis server (standalone or
// with replicas), reachable from every host that can reach the server, so
// that a weight store and the rendezvous of live sessions need no shared
// filesystem.
//
// URIs (the password never appears in messages or in uri()):
//   redis://[[user]:password@]host:port[/db][?option=value&...]
//   unix:///path/to/redis.sock[?db=N&option=value&...]
// A user or password percent-encodes '/', '?', '#' and '@' (an unencoded
// one is refused, the URI shown with everything before its last '@'
// hidden). Without a password in the URI (redis://host:port, or
// redis://user:@host:port to name a user), the password is taken from the
// environment variable RESHARD_REDIS_PASSWORD, if set, so that it need not
// appear in a command line.
// Options: prefix=P (the key prefix, default "reshard", no ':'; several
// stores can share one database under different prefixes), sync=fsync|none
// (what Sync() requires, below), replicas=N (Sync() also waits for N replicas).
//
// Semantics equal those of the fs backend (include/reshard/sdk/object_store.h):
// create-only records and objects, one winner of racing writers, atomic
// publication (an object's chunks are written under a private token, then
// its descriptor is published by one server-side script), ranged reads that
// fetch only the chunks they need, straight into caller memory, and List
// in key order from an index kept by the same scripts (no KEYS, no SCAN).
// The key layout and durability notes are in docs/store-format.md.
//
// Durability: Redis acknowledges a write when it is in memory. Sync()
// succeeds only if the server appends every write to its AOF and fsyncs it
// before replying (appendonly yes, appendfsync always); otherwise it fails
// naming the setting, unless the store was opened with sync=none, which
// accepts losing the newest writes when the server restarts. With
// replicas=N, Sync() also waits (WAIT) until N replicas hold every write.

#ifndef RESHARD_BACKENDS_REDIS_STORE_H_
#define RESHARD_BACKENDS_REDIS_STORE_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string_view>

#include "reshard/sdk/backend_registry.h"  // RedactUriPassword
#include "reshard/sdk/object_store.h"
#include "reshard/status.h"

namespace reshard {

struct RedisStoreOptions {
  // Objects larger than this are stored as chunks of this many bytes (one
  // Redis value each); smaller ones, and records, as one value.
  uint64_t chunk_bytes = uint64_t{4} << 20;
  // Connections one ReadRanges spreads its chunks over.
  uint32_t connections = 2;
  // Connections one PutObject spreads its chunks over. One: a Redis server
  // runs commands on one thread, so a second stream of 4 MiB SETs only
  // interleaves with the first (1 GiB uploads, the two alternated in one
  // process: 0.20-0.34 GB/s over one connection, 0.13-0.25 GB/s over
  // two, raw SETs 0.21-0.43 GB/s).
  uint32_t write_connections = 1;
  // Commands pipelined on a connection before its replies are read.
  uint32_t pipeline_depth = 4;
  // Connecting, and waiting for any one reply.
  std::chrono::milliseconds timeout{10000};
  // Whether the store promises durability (a weight store): then opening
  // it and Sync() check the server as described above. A rendezvous, whose
  // records mean nothing once its processes are gone, does not.
  bool require_durable = true;
};

// Opens the store named by `uri`; the URI's options (prefix, sync,
// replicas) complete `options`. Connects once, so that an unreachable
// server or a wrong password fails here, naming the URI.
Result<std::unique_ptr<ObjectStore>> OpenRedisStore(
    std::string_view uri, const RedisStoreOptions& options = {});

// True for the URI schemes this backend serves (redis://, unix://).
bool IsRedisUri(std::string_view uri);

}  // namespace reshard

#endif  // RESHARD_BACKENDS_REDIS_STORE_H_
