// The descriptor of a chunked object in the Redis backend
// (src/store_redis/redis_descriptor.h): the value a server returns at a
// key, trusted by no one. Properties: an accepted descriptor is within
// every limit (chunk bytes, chunk count, size), so reading it whole asks
// for at most kMaxRedisChunks chunks; a read sized from it is refused past
// kMaxRedisGetBytes; it renders back to exactly the input (one spelling).
// The seeds hold sizes, chunk sizes and counts at and past the limits.

#include <string>

#include "fuzz/fuzz_check.h"
#include "store_redis/redis_descriptor.h"

namespace internal = reshard::internal;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view value = reshard::fuzz::AsView(data, size);
  const auto d = internal::ParseRedisDescriptor(value);
  if (!d) return 0;
  FUZZ_CHECK(d->chunk_bytes >= internal::kMinRedisChunkBytes &&
                 d->chunk_bytes <= internal::kMaxRedisChunkBytes,
             "chunk bytes within the limits");
  FUZZ_CHECK(d->size > 0, "a chunked object holds bytes");
  FUZZ_CHECK(d->chunks() <= internal::kMaxRedisChunks,
             "chunk count within the limit");
  FUZZ_CHECK((d->chunks() - 1) * d->chunk_bytes < d->size &&
                 d->size <= d->chunks() * d->chunk_bytes,
             "chunk count consistent with the size");
  FUZZ_CHECK(internal::ValidRedisToken(d->token), "a writer's token");
  FUZZ_CHECK(internal::RenderRedisDescriptor(*d) == value,
             "one spelling per descriptor");
  // The reads a whole-object read would plan: one per chunk.
  uint64_t reads = 0;
  for (uint64_t at = 0; at < d->size; at += d->chunk_bytes) ++reads;
  FUZZ_CHECK(reads == d->chunks(), "one read per chunk");
  return 0;
}
