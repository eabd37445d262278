// What a Redis backend key P:k:<key> holds when it is a chunked object, and
// the limits every size read from the server is held to before it sizes
// anything (an allocation, a list of reads, a loop in a server script).
//
// A chunked object's value is the descriptor "c<size> <chunk_bytes>
// <token>", written by RedisStore::PutObject. A server is not trusted to
// return what was written: a descriptor is accepted only when
//   - size and chunk_bytes are decimals without sign or leading zero;
//   - chunk_bytes is in [kMinChunkBytes, kMaxChunkBytes];
//   - size is at least 1 and at most kMaxChunks chunks of chunk_bytes
//     (so at most 4 TiB at the default 4 MiB chunks);
//   - token is what a writer draws: 1-8 lowercase hex digits (its pid), a
//     '-' and 32 lowercase hex digits.
// Anything else is DataLoss "object <key> in <uri> has a malformed
// descriptor" (docs/store-format.md, "The Redis backend").

#ifndef RESHARD_STORE_REDIS_REDIS_DESCRIPTOR_H_
#define RESHARD_STORE_REDIS_REDIS_DESCRIPTOR_H_

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace reshard::internal {

// A chunk holds at least this many bytes (but the last). Smaller chunks
// would let a descriptor turn one read into a piece of bookkeeping per
// byte; a store opened with a smaller chunk_bytes is refused.
inline constexpr uint64_t kMinRedisChunkBytes = uint64_t{4} << 10;
// Redis's own limit on one value (proto-max-bulk-len, 512 MiB by default).
inline constexpr uint64_t kMaxRedisChunkBytes = uint64_t{512} << 20;
// The most chunks one object has: bounds the chunk loops of the server
// scripts (Delete) and the reads one object can ask for.
inline constexpr uint64_t kMaxRedisChunks = uint64_t{1} << 20;
// The most bytes Get returns (a record, or an object read whole): the
// largest value a Redis server holds (a record is one value), so no record
// a server accepted is refused; a larger chunked object is refused before
// anything is allocated.
inline constexpr uint64_t kMaxRedisGetBytes = uint64_t{512} << 20;
// The most bytes of one reply the client parses into memory (hiredis
// replies: records, key lists, script results); a bulk value read into
// caller memory is held to the length the caller expects instead.
inline constexpr uint64_t kMaxRedisReplyBytes =
    kMaxRedisGetBytes + (uint64_t{1} << 20);

struct RedisDescriptor {
  uint64_t size = 0;
  uint64_t chunk_bytes = 0;
  std::string token;
  // ceil(size / chunk_bytes), at most kMaxRedisChunks.
  uint64_t chunks() const { return (size + chunk_bytes - 1) / chunk_bytes; }
};

// The descriptor in `value`, or nullopt if it breaks any rule above.
std::optional<RedisDescriptor> ParseRedisDescriptor(std::string_view value);

// The one spelling of `d`: ParseRedisDescriptor(RenderRedisDescriptor(d))
// is `d` for every descriptor it accepts.
std::string RenderRedisDescriptor(const RedisDescriptor& d);

// Whether `token` is a writer's token (see above).
bool ValidRedisToken(std::string_view token);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_REDIS_REDIS_DESCRIPTOR_H_
