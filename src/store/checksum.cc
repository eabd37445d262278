#include "store/checksum.h"

#include <xxhash.h>
#if RESHARD_HAVE_XXH_DISPATCH
// Routes XXH3_64bits* to the run-time AVX2/AVX-512 dispatcher.
#include <xxh_x86dispatch.h>
#endif

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace reshard::internal {
namespace {

constexpr std::string_view kHeader = "xxh3-64 v1 ";

std::string Hex(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

}  // namespace

std::string ChecksumRecord(const uint8_t* data, uint64_t size,
                           uint64_t chunk_bytes) {
  if (chunk_bytes == 0) chunk_bytes = std::max<uint64_t>(size, 1);
  std::string out = std::string(kHeader) +
                    "chunk_bytes=" + std::to_string(chunk_bytes) +
                    " size=" + std::to_string(size) + "\n";
  for (uint64_t at = 0; at < size; at += chunk_bytes) {
    out += Hex(XXH3_64bits(data + at, std::min(chunk_bytes, size - at)));
    out += '\n';
  }
  return out;
}

Result<ChunkSums> ParseChecksumRecord(std::string_view record) {
  auto bad = [] { return Status::DataLoss("malformed checksum record"); };
  if (!record.starts_with(kHeader)) return bad();
  const size_t eol = record.find('\n');
  if (eol == std::string_view::npos) return bad();
  ChunkSums s;
  // Exactly "chunk_bytes=<digits> size=<digits>", no sign, no overflow.
  std::string_view header = record.substr(kHeader.size(), eol - kHeader.size());
  auto number = [&](std::string_view name, uint64_t* out) {
    if (!header.starts_with(name)) return false;
    header.remove_prefix(name.size());
    size_t n = 0;
    uint64_t v = 0;
    while (n < header.size() && header[n] >= '0' && header[n] <= '9') {
      const uint64_t d = static_cast<uint64_t>(header[n] - '0');
      if (v > (UINT64_MAX - d) / 10) return false;
      v = v * 10 + d;
      ++n;
    }
    // One spelling per number: no leading zeros.
    if (n == 0 || n > 20 || (n > 1 && header[0] == '0')) return false;
    header.remove_prefix(n);
    *out = v;
    return true;
  };
  if (!number("chunk_bytes=", &s.chunk_bytes) || !number(" size=", &s.size) ||
      !header.empty() || s.chunk_bytes == 0) {
    return bad();
  }
  size_t pos = eol + 1;
  while (pos < record.size()) {
    const size_t end = record.find('\n', pos);
    if (end == std::string_view::npos || end - pos != 16) return bad();
    uint64_t v = 0;
    for (size_t i = pos; i < end; ++i) {
      const char c = record[i];
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                           : -1;
      if (d < 0) return bad();
      v = (v << 4) | static_cast<uint64_t>(d);
    }
    s.sums.push_back(v);
    pos = end + 1;
  }
  const uint64_t chunks =
      s.size / s.chunk_bytes + (s.size % s.chunk_bytes != 0 ? 1 : 0);
  if (s.sums.size() != chunks) return bad();
  return s;
}

Status VerifyChunks(const ChunkSums& sums, uint64_t offset, const uint8_t* data,
                    uint64_t n, std::string_view object_key,
                    std::string_view fragment_id, uint64_t* chunks_verified) {
  return VerifyChunks(sums, offset, {{data, n}}, object_key, fragment_id,
                      chunks_verified);
}

Status VerifyChunks(const ChunkSums& sums, uint64_t offset,
                    const std::vector<ConstBuffer>& parts,
                    std::string_view object_key, std::string_view fragment_id,
                    uint64_t* chunks_verified) {
  uint64_t n = 0;
  for (const ConstBuffer& p : parts) n += p.size;
  if (sums.chunk_bytes == 0 || offset % sums.chunk_bytes != 0 ||
      offset + n > sums.size || offset + n < offset) {
    return Status::Internal("unaligned checksum verification of " +
                            std::string(object_key));
  }
  // A chunk inside one part is hashed in one call; one spread over
  // several parts through a streaming state.
  XXH3_state_t* state = nullptr;
  size_t part = 0;
  uint64_t within = 0;  // bytes of parts[part] already hashed
  Status result;
  for (uint64_t at = 0; at < n && result.ok(); at += sums.chunk_bytes) {
    const uint64_t len = std::min(sums.chunk_bytes, n - at);
    const uint64_t chunk = (offset + at) / sums.chunk_bytes;
    if (len != std::min(sums.chunk_bytes, sums.size - (offset + at))) {
      result = Status::Internal("partial chunk verification of " +
                                std::string(object_key));
      break;
    }
    while (parts[part].size == within) {  // skip empty and finished parts
      ++part;
      within = 0;
    }
    const auto* first = static_cast<const uint8_t*>(parts[part].data);
    uint64_t got = 0;
    if (parts[part].size - within >= len) {
      got = XXH3_64bits(first + within, len);
      within += len;
    } else {
      if (state == nullptr) state = XXH3_createState();
      XXH3_64bits_reset(state);
      for (uint64_t left = len; left > 0;) {
        if (parts[part].size == within) {
          ++part;
          within = 0;
          continue;
        }
        const uint64_t take = std::min(left, parts[part].size - within);
        XXH3_64bits_update(
            state, static_cast<const uint8_t*>(parts[part].data) + within,
            take);
        within += take;
        left -= take;
      }
      got = XXH3_64bits_digest(state);
    }
    if (got != sums.sums[chunk]) {
      result = Status::DataLoss(
          "checksum mismatch in stored fragment " + std::string(fragment_id) +
          " (object " + std::string(object_key) + ") at bytes [" +
          std::to_string(offset + at) + ", " +
          std::to_string(offset + at + len) + "): expected " +
          Hex(sums.sums[chunk]) + ", got " + Hex(got));
    } else if (chunks_verified != nullptr) {
      ++*chunks_verified;
    }
  }
  if (state != nullptr) XXH3_freeState(state);
  return result;
}

}  // namespace reshard::internal
