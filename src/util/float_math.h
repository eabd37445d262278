// The element arithmetic of the float conversions (docs/conversion.md), one
// implementation for the CPU and the GPU: every function here is
// RESHARD_HOST_DEVICE, so the CPU loops of float_convert.cc inline it and
// the CUDA kernels (exec_cuda/convert_kernels.h) run the very same code.
//
// Rounding is done on the bits or by single IEEE float32 operations in
// round-to-nearest-even (no fast-math on either side; the kernels are
// compiled without contraction into fused multiply-adds, as the CPU code
// is). Header-only and C++17 (nvcc compiles the kernels as C++17).
#ifndef RESHARD_UTIL_FLOAT_MATH_H_
#define RESHARD_UTIL_FLOAT_MATH_H_

#include <cstdint>

// __host__ __device__ under nvcc, nothing elsewhere (the same definition as
// exec_cuda/gather_scatter.h's).
#if defined(__CUDACC__)
#define RESHARD_HOST_DEVICE __host__ __device__
#else
#define RESHARD_HOST_DEVICE
#endif

namespace reshard::internal {

enum class FloatType : uint8_t {
  kFloat32,
  kBFloat16,
  kFloat16,
  kFloat8E4M3,  // float8_e4m3fn: no infinities, 0x7F/0xFF NaN
};

// Bytes of one element.
RESHARD_HOST_DEVICE constexpr uint32_t ElementBytes(FloatType type) {
  return type == FloatType::kFloat32      ? 4
         : type == FloatType::kFloat8E4M3 ? 1
                                          : 2;
}

RESHARD_HOST_DEVICE constexpr uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  return __builtin_bit_cast(uint32_t, f);
#endif
}

RESHARD_HOST_DEVICE constexpr float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  return __builtin_bit_cast(float, u);
#endif
}

// Rounds 0 <= t < 2^22 to the nearest integer, ties to even: adding 2^23
// leaves no fraction bits, so the float32 addition itself rounds (IEEE
// round-to-nearest-even, the default mode).
RESHARD_HOST_DEVICE inline float RoundHalfEvenSmall(float t) {
  constexpr float kMagic = 8388608.0f;  // 2^23
  return (t + kMagic) - kMagic;
}

// bfloat16 -> float32: exact.
RESHARD_HOST_DEVICE inline float Bf16ToF32(uint16_t h) {
  return BitsFloat(static_cast<uint32_t>(h) << 16);
}

// float16 -> float32: exact. Both paths computed and one selected (no
// branch), so that row loops vectorize; integer-to-float conversions are
// signed ones, which every vector unit has.
RESHARD_HOST_DEVICE inline float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  const uint32_t exponent = (h >> 10) & 0x1F;
  const uint32_t mantissa = h & 0x3FF;
  // Zero or subnormal: m * 2^-24, exact in float32.
  const float m = static_cast<float>(static_cast<int32_t>(mantissa)) *
                  5.9604644775390625e-08f;
  const uint32_t subnormal = FloatBits(m) | sign;
  // Exponent 31 (infinity, NaN) becomes 0xFF: 31 + 112 = 0x8F, ORed.
  const uint32_t e32 = (exponent + 112) | ((0u - (exponent == 31)) & 0xFF);
  const uint32_t normal = sign | (e32 << 23) | (mantissa << 13);
  const uint32_t is_subnormal = 0u - (exponent == 0);
  return BitsFloat((subnormal & is_subnormal) | (normal & ~is_subnormal));
}

// float8_e4m3fn -> float32: exact; 0x7F/0xFF give the quiet NaN 0x7FC00000
// with the code's sign. Subnormals (exponent 0) are m * 2^-9; a normal's
// exponent is rebiased 7 -> 127 and its mantissa moved up 20 bits.
RESHARD_HOST_DEVICE constexpr float E4m3ToF32(uint8_t q) {
  const uint32_t sign = static_cast<uint32_t>(q & 0x80) << 24;
  const uint32_t exponent = (q >> 3) & 0xF;
  const uint32_t mantissa = q & 0x7;
  uint32_t magnitude = 0;
  if (exponent == 0) {
    magnitude = FloatBits(static_cast<float>(mantissa) / 512.0f);
  } else if (exponent == 15 && mantissa == 7) {
    magnitude = 0x7FC00000;
  } else {
    magnitude = ((exponent + 120) << 23) | (mantissa << 20);
  }
  return BitsFloat(sign | magnitude);
}

// float32 -> bfloat16: round to nearest even; NaN becomes 0x7FC0 with its
// sign.
RESHARD_HOST_DEVICE inline uint16_t F32ToBf16(float f) {
  const uint32_t x = FloatBits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  if ((x & 0x7FFFFFFF) > 0x7F800000) return sign | 0x7FC0;
  const uint32_t rounded = x + 0x7FFF + ((x >> 16) & 1);
  return static_cast<uint16_t>(rounded >> 16);
}

// float32 -> float16: IEEE round to nearest even, overflow to infinity;
// NaN becomes 0x7E00 with its sign.
RESHARD_HOST_DEVICE inline uint16_t F32ToF16(float f) {
  const uint32_t x = FloatBits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000);
  const uint32_t a = x & 0x7FFFFFFF;
  if (a > 0x7F800000) return sign | 0x7E00;
  if (a >= 0x477FF000) return sign | 0x7C00;  // >= 65520 rounds up to inf
  if (a >= 0x38800000) {                      // >= 2^-14: normal
    uint32_t v = a - (112u << 23);            // exponent bias 127 -> 15
    v += 0xFFF + ((v >> 13) & 1);
    return sign | static_cast<uint16_t>(v >> 13);
  }
  // Subnormal (or zero): m * 2^-24 with m = round(|f| * 2^24) < 2^10; the
  // scaling by a power of two is exact. m = 1024 is the smallest normal.
  const float t = BitsFloat(a) * 16777216.0f;
  return sign | static_cast<uint16_t>(RoundHalfEvenSmall(t));
}

// float32 -> float8_e4m3fn: round to nearest even; |f| >= 448 (infinity
// included) gives 448 with the sign; |f| <= 2^-10 gives a signed zero; NaN
// gives 0x7F with its sign. Branch-free (every path computed, one
// selected) so that row loops vectorize; the subnormal path only ever sees
// magnitudes below 2^-6.
RESHARD_HOST_DEVICE inline uint8_t F32ToE4m3(float f) {
  const uint32_t x = FloatBits(f);
  const uint32_t sign = (x >> 24) & 0x80;
  const uint32_t a = x & 0x7FFFFFFF;
  // >= 2^-6: normal; exponent bias 127 -> 7, round to nearest even.
  uint32_t v = a - (120u << 23);
  v += 0x7FFFF + ((v >> 20) & 1);
  const uint32_t normal = (v >> 20) & 0x7F;
  // Subnormal: m * 2^-9 with m = round(|f| * 512) <= 8 (8 is 2^-6, code
  // 0x08); |f| <= 2^-10 rounds to m = 0.
  const uint32_t clamped = a < 0x3C800000u ? a : 0x3C800000u;
  const float small = BitsFloat(clamped);
  const auto sub = static_cast<uint32_t>(
      static_cast<int32_t>(RoundHalfEvenSmall(small * 512.0f)));
  uint32_t q = a >= 0x3C800000 ? normal : sub;
  q = a >= 0x43E00000 ? 0x7Eu : q;  // >= 448, infinity: saturate
  q = a > 0x7F800000 ? 0x7Fu : q;   // NaN
  return static_cast<uint8_t>(sign | q);
}

// Element `i` of `type` at `src`, widened to float32 (exact).
RESHARD_HOST_DEVICE inline float WidenElement(FloatType type, const void* src,
                                              uint64_t i) {
  switch (type) {
    case FloatType::kFloat32:
      return static_cast<const float*>(src)[i];
    case FloatType::kBFloat16:
      return Bf16ToF32(static_cast<const uint16_t*>(src)[i]);
    case FloatType::kFloat16:
      return F16ToF32(static_cast<const uint16_t*>(src)[i]);
    case FloatType::kFloat8E4M3:
      return E4m3ToF32(static_cast<const uint8_t*>(src)[i]);
  }
  return 0;
}

// `x` rounded to `type`, stored as element `i` at `dst`.
RESHARD_HOST_DEVICE inline void NarrowElement(float x, FloatType type,
                                              void* dst, uint64_t i) {
  switch (type) {
    case FloatType::kFloat32:
      static_cast<float*>(dst)[i] = x;
      return;
    case FloatType::kBFloat16:
      static_cast<uint16_t*>(dst)[i] = F32ToBf16(x);
      return;
    case FloatType::kFloat16:
      static_cast<uint16_t*>(dst)[i] = F32ToF16(x);
      return;
    case FloatType::kFloat8E4M3:
      static_cast<uint8_t*>(dst)[i] = F32ToE4m3(x);
      return;
  }
}

// Block quantization (docs/conversion.md). A block's amax is the largest
// |x| of its elements, NaN elements not taking part: compared as the bits
// of the magnitudes (sign cleared), whose integer order is the float order
// for everything but NaN, which counts as 0. A maximum of bits is exact in
// any order, so partial maxima combine freely.
RESHARD_HOST_DEVICE inline uint32_t MagnitudeBits(float x) {
  const uint32_t a = FloatBits(x) & 0x7FFFFFFF;
  return a > 0x7F800000 ? 0 : a;
}

// The block's amax as quantization uses it: at least 1e-4.
RESHARD_HOST_DEVICE inline float ClampedAmax(uint32_t amax_bits) {
  const float m = BitsFloat(amax_bits);
  return m > 1e-4f ? m : 1e-4f;
}

// factor = 448 / amax (one float32 division): what elements are scaled by.
RESHARD_HOST_DEVICE inline float QuantizeFactor(float clamped_amax) {
  return 448.0f / clamped_amax;
}

// scale = amax / 448 (one float32 division): the block's stored scale.
RESHARD_HOST_DEVICE inline float QuantizeScale(float clamped_amax) {
  return clamped_amax / 448.0f;
}

// What an x86 CPU (SSE/AVX) gives for a product `p` = a * b that is NaN:
// the NaN operand, quieted, when one operand is NaN; the default NaN
// 0xFFC00000 (negative) for infinity times zero. Any other `p` is
// returned as it is. With both operands NaN, x86 returns the first source
// operand's, and which that is the compiler chooses (a product commutes):
// then this returns a's, and only "a NaN" is the same everywhere (the
// conversions meet this only for a NaN code with a NaN scale).
RESHARD_HOST_DEVICE inline float X86NanProduct(float a, float b, float p) {
  const uint32_t pa = FloatBits(a), pb = FloatBits(b);
  if ((FloatBits(p) & 0x7FFFFFFF) <= 0x7F800000) return p;
  if ((pa & 0x7FFFFFFF) > 0x7F800000) return BitsFloat(pa | 0x00400000);
  if ((pb & 0x7FFFFFFF) > 0x7F800000) return BitsFloat(pb | 0x00400000);
  return BitsFloat(0xFFC00000u);
}

// a * b, one float32 multiplication, with NaN results as x86 gives them
// (the CPU results the conversions were defined on). On x86 that is the
// multiplication itself; a GPU gives every NaN result as 0x7FFFFFFF, and
// other CPUs their own default NaN, so there the NaN is rewritten
// (X86NanProduct), keeping NaN signs (and float32 payloads) the same
// everywhere.
RESHARD_HOST_DEVICE inline float MulX86(float a, float b) {
#if defined(__CUDA_ARCH__) || !(defined(__x86_64__) || defined(__i386__))
  return X86NanProduct(a, b, a * b);
#else
  return a * b;
#endif
}

// q = e4m3(x * factor): one float32 multiplication, then the conversion.
RESHARD_HOST_DEVICE inline uint8_t QuantizeElement(float x, float factor) {
  return F32ToE4m3(MulX86(x, factor));
}

// y = float(q) * scale: one float32 multiplication (rounded to the target
// type by the caller).
RESHARD_HOST_DEVICE inline float DequantizeElement(float q_value, float scale) {
  return MulX86(q_value, scale);
}

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_FLOAT_MATH_H_
