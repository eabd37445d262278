// ParseChecksumRecord. Properties: the decoder is strict, so a record it
// accepts is exactly the rendering of what it decoded; the sums cover the
// object; and verifying a small object against the record never reads
// past the data (it may of course report a mismatch).

#include <cinttypes>
#include <string>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "store/checksum.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view record = reshard::fuzz::AsView(data, size);
  auto sums = reshard::internal::ParseChecksumRecord(record);
  if (!sums.ok()) return 0;
  FUZZ_CHECK(sums->chunk_bytes > 0, "chunk size is positive");
  const uint64_t chunks = sums->size / sums->chunk_bytes +
                          (sums->size % sums->chunk_bytes != 0 ? 1 : 0);
  FUZZ_CHECK(sums->sums.size() == chunks, "one sum per chunk");
  std::string rendered =
      "xxh3-64 v1 chunk_bytes=" + std::to_string(sums->chunk_bytes) +
      " size=" + std::to_string(sums->size) + "\n";
  for (uint64_t s : sums->sums) {
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016" PRIx64, s);
    rendered += hex;
    rendered += '\n';
  }
  FUZZ_CHECK(rendered == record, "an accepted record is canonical");
  if (sums->size <= (uint64_t{1} << 16)) {
    const std::vector<uint8_t> object(sums->size, 0);
    uint64_t verified = 0;
    auto st = reshard::internal::VerifyChunks(
        *sums, 0, object.data(), object.size(), "key", "fragment", &verified);
    FUZZ_CHECK(!st.ok() || verified == chunks, "every chunk verified");
  }
  return 0;
}
