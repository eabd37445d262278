#include "util/stream_copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace reshard::internal {

#if defined(__x86_64__)
namespace {

__attribute__((target("avx2"))) void StreamCopyAvx2(uint8_t* d,
                                                    const uint8_t* s,
                                                    size_t n) {
  // Align the destination to 32 bytes, stream 128-byte blocks, copy the
  // tail normally.
  size_t head = (32 - (reinterpret_cast<uintptr_t>(d) & 31)) & 31;
  if (head > n) head = n;
  std::memcpy(d, s, head);
  d += head;
  s += head;
  n -= head;
  const size_t blocks = n / 128;
  for (size_t i = 0; i < blocks; ++i) {
    const __m256i a = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s));
    const __m256i b =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 32));
    const __m256i c =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 64));
    const __m256i e =
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(s + 96));
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d), a);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 32), b);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 64), c);
    _mm256_stream_si256(reinterpret_cast<__m256i*>(d + 96), e);
    s += 128;
    d += 128;
  }
  std::memcpy(d, s, n - blocks * 128);
}

const bool kHasAvx2 = __builtin_cpu_supports("avx2");

}  // namespace
#endif

void StreamCopy(void* dst, const void* src, size_t n) {
#if defined(__x86_64__)
  if (kHasAvx2 && n >= 256) {
    StreamCopyAvx2(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src),
                   n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

void StreamFence() {
#if defined(__x86_64__)
  _mm_sfence();
#endif
}

}  // namespace reshard::internal
