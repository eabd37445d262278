// Payload checksums: XXH3-64 of every `chunk_bytes` chunk of an object
// (the last chunk may be short), stored as a small text record:
//   "xxh3-64 v1 chunk_bytes=<C> size=<N>\n" then one 16-digit hex per line.
// Loads verify exactly the chunks they deliver.

#ifndef RESHARD_STORE_CHECKSUM_H_
#define RESHARD_STORE_CHECKSUM_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "reshard/sdk/object_store.h"
#include "reshard/status.h"

namespace reshard::internal {

struct ChunkSums {
  uint64_t chunk_bytes = 0;
  uint64_t size = 0;
  std::vector<uint64_t> sums;
};

std::string ChecksumRecord(const uint8_t* data, uint64_t size,
                           uint64_t chunk_bytes);
Result<ChunkSums> ParseChecksumRecord(std::string_view record);

// Verifies the chunks of `data` = object bytes [offset, offset + n).
// `offset` must be chunk-aligned and n a whole number of chunks, or reach
// the object's end. DataLoss names the object, fragment and byte range.
Status VerifyChunks(const ChunkSums& sums, uint64_t offset, const uint8_t* data,
                    uint64_t n, std::string_view object_key,
                    std::string_view fragment_id, uint64_t* chunks_verified);
// The same for object bytes [offset, offset + total size) held by `parts`
// in order (a chunk may be spread over several parts).
Status VerifyChunks(const ChunkSums& sums, uint64_t offset,
                    const std::vector<ConstBuffer>& parts,
                    std::string_view object_key, std::string_view fragment_id,
                    uint64_t* chunks_verified);

}  // namespace reshard::internal

#endif  // RESHARD_STORE_CHECKSUM_H_
