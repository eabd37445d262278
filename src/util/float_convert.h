// Element conversions of a reshard with conversion: float casts among
// float32, bfloat16 and float16, and float8_e4m3fn block quantization and
// dequantization, bit for bit as docs/conversion.md states them.
//
// Every kernel is a plain loop over contiguous rows so that the compiler
// vectorizes it; each is also exact in scalar code (no fast-math, no
// rounding-mode dependence: rounding is done on the bits). The arithmetic
// per element and per block is float_math.h's, which the CUDA kernels
// (exec_cuda/convert_kernels.h) share.

#ifndef RESHARD_UTIL_FLOAT_CONVERT_H_
#define RESHARD_UTIL_FLOAT_CONVERT_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

#include "util/float_math.h"  // FloatType; the element arithmetic

namespace reshard::internal {

// The placement dtype names: float32, bfloat16, float16, float8_e4m3fn;
// nullopt for any other dtype (integers, float64, float8_e5m2).
std::optional<FloatType> FloatTypeOf(std::string_view dtype);
size_t SizeOf(FloatType type);

// Scalar conversions (the kernels below apply them element by element).
float BFloat16ToFloat(uint16_t h);
float Float16ToFloat(uint16_t h);
float E4m3ToFloat(uint8_t q);
// Round to nearest even; NaN becomes 0x7FC0 with its sign.
uint16_t FloatToBFloat16(float f);
// IEEE round to nearest even, overflow to infinity; NaN becomes 0x7E00
// with its sign.
uint16_t FloatToFloat16(float f);
// Round to nearest even; |f| >= 448 (infinity included) gives 448 with the
// sign; |f| <= 2^-10 gives a signed zero; NaN gives 0x7F with its sign.
uint8_t FloatToE4m3(float f);

// Converts `n` elements of `from` at `src` to `to` at `dst` (float casts:
// float32, bfloat16, float16; both the same type is a copy). Through
// float32, so a 16-bit to 16-bit cast rounds once from an exact value.
void CastElements(FloatType from, const void* src, FloatType to, void* dst,
                  size_t n);

// A row-major matrix view: `rows` x `cols` elements, rows `row_stride`
// elements apart.
struct MatrixView {
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t row_stride = 0;
};

// Quantizes a float matrix (float32, bfloat16 or float16) into
// float8_e4m3fn blocks of `block_rows` x `block_cols` anchored at its
// element (0, 0) (edge blocks partial): per block amax = the largest |x|
// (NaN elements do not take part), at least 1e-4; factor = 448 / amax;
// q = e4m3(x * factor); scale = amax / 448. `scales` is a row-major
// matrix of ceil(rows / block_rows) x ceil(cols / block_cols) values,
// `scale_row_stride` apart.
void QuantizeE4m3Blocks(FloatType from, const void* src,
                        const MatrixView& shape, int64_t block_rows,
                        int64_t block_cols, uint8_t* dst,
                        int64_t dst_row_stride, float* scales,
                        int64_t scale_row_stride);

// Dequantizes: y = float(q) * scale of q's block (one float32
// multiplication), then rounded to `to` (float32, bfloat16, float16).
void DequantizeE4m3Blocks(const uint8_t* src, const MatrixView& shape,
                          int64_t block_rows, int64_t block_cols,
                          const float* scales, int64_t scale_row_stride,
                          FloatType to, void* dst, int64_t dst_row_stride);

}  // namespace reshard::internal

#endif  // RESHARD_UTIL_FLOAT_CONVERT_H_
