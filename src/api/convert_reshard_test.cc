// A converting reshard in one process (PlanOptions::convert): bfloat16 ->
// FP8 blocks with produced scales, FP8 blocks -> bfloat16 with read
// scales, float16 -> bfloat16; the refusals. Expected values come from the
// kernels applied to the whole tensor (FloatConvertTest checks the
// kernels against an independent reference), so these tests check that
// every fragment converts its own box with the global block grid.

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "bind/binding_copy.h"
#include "reshard/api.h"
#include "reshard/plan.h"
#include "testing/fp8_layout.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"
#include "util/float_convert.h"

namespace reshard {
namespace {

using ::reshard::internal::FloatType;
using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kRows = testing::kFp8Rows, kCols = testing::kFp8Cols;
const std::string& kWeight = testing::kFp8Weight;
const std::string& kScale = testing::kFp8Scale;
using Tensor = testing::Fp8Tensor;

// The FP8 model with a bfloat16 norm.
WeightPlacementManifest Layout(int64_t tp, const Tensor& weight,
                               const std::optional<Tensor>& scale) {
  return testing::Fp8Layout(tp, weight, {"bfloat16", 2}, scale);
}

// Host memory of every fragment of a placement, filled from whole tensors.
struct Memory {
  std::map<std::string, std::vector<char>, std::less<>> buffers;
  std::vector<WeightRuntimeBindingManifest> bindings;
};

Memory Allocate(const WeightPlacementManifest& p,
                const std::map<std::string, std::vector<char>>& whole,
                const std::string& instance) {
  Memory m;
  for (const auto* f : p.fragments()) {
    auto& buf = m.buffers[f->placement_fragment_id()];
    buf.assign(f->nbytes(), 0);
    auto it = whole.find(f->tensor_id());
    if (it == whole.end()) continue;
    const TensorDescriptor* t = p.FindTensor(f->tensor_id());
    const int64_t cols = t->ndim() == 2 ? t->global_shape()[1] : 0;
    const int64_t item = t->itemsize();
    if (cols == 0) {
      std::memcpy(buf.data(), it->second.data(), buf.size());
      continue;
    }
    const Dims& o = f->global_offset();
    const Dims& n = f->local_shape();
    for (int64_t r = 0; r < n[0]; ++r) {
      std::memcpy(buf.data() + r * n[1] * item,
                  it->second.data() + ((o[0] + r) * cols + o[1]) * item,
                  n[1] * item);
    }
  }
  BufferBindingOptions o;
  o.instance_id = instance;
  m.bindings = Must(BindAllBuffers(
                        p,
                        [&](std::string_view id) -> void* {
                          return m.buffers.find(id)->second.data();
                        },
                        o))
                   .bindings();
  return m;
}

// Every fragment of `p` in `m` equals its box of `whole`.
void ExpectHolds(const WeightPlacementManifest& p, const Memory& m,
                 const std::map<std::string, std::vector<char>>& whole) {
  const auto empty = std::map<std::string, std::vector<char>>{};
  Memory expected = Allocate(p, whole, "expected");
  for (const auto* f : p.fragments()) {
    if (!whole.count(f->tensor_id())) continue;
    EXPECT_EQ(m.buffers.find(f->placement_fragment_id())->second,
              expected.buffers.find(f->placement_fragment_id())->second)
        << f->tensor_id() << " " << f->placement_fragment_id();
  }
}

std::vector<char> RandomFloats(int64_t n, FloatType type, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> f(n);
  for (auto& v : f) v = normal(rng);
  f[5] = 0.0f;
  f[7] = -1e-30f;
  std::vector<char> out(n * internal::SizeOf(type));
  internal::CastElements(FloatType::kFloat32, f.data(), type, out.data(), n);
  return out;
}

Result<ReshardReport> RunConverting(
    const WeightPlacementManifest& source,
    const std::map<std::string, std::vector<char>>& in,
    const WeightPlacementManifest& target, Memory* out, bool convert) {
  Memory src = Allocate(source, in, "src");
  *out = Allocate(target, {}, "dst");
  ReshardOptions options;
  options.plan.convert = convert;
  options.threads = 2;
  return Reshard(source, src.bindings, target, out->bindings, options);
}

TEST(ConvertReshardTest, BFloat16ToFp8BlocksAtTp2) {
  const auto source = Layout(1, {"bfloat16", 2, -1}, std::nullopt);
  const auto target =
      Layout(2, {"float8_e4m3fn", 1, 1}, Tensor{"float32", 4, 1});
  std::map<std::string, std::vector<char>> in = {
      {kWeight, RandomFloats(kRows * kCols, FloatType::kBFloat16, 1)},
      {"model.norm.weight", RandomFloats(kCols, FloatType::kBFloat16, 2)}};
  Memory out;
  EXPECT_THAT(RunConverting(source, in, target, &out, false),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("tensor descriptor mismatch: " + kWeight +
                                 ": dtype bfloat16 (source) vs "
                                 "float8_e4m3fn (target)")));
  ASSERT_OK(RunConverting(source, in, target, &out, true));
  std::map<std::string, std::vector<char>> expected = in;
  expected[kWeight].assign(kRows * kCols, 0);
  expected[kScale].assign(6 * 4, 0);
  internal::QuantizeE4m3Blocks(
      FloatType::kBFloat16, in[kWeight].data(), {kRows, kCols, kCols}, 128, 128,
      reinterpret_cast<uint8_t*>(expected[kWeight].data()), kCols,
      reinterpret_cast<float*>(expected[kScale].data()), 2);
  ExpectHolds(target, out, expected);
}

TEST(ConvertReshardTest, Fp8BlocksToBFloat16AndFloat16ToBFloat16) {
  const auto source =
      Layout(1, {"float8_e4m3fn", 1, -1}, Tensor{"float32", 4, -1});
  const auto target = Layout(2, {"bfloat16", 2, 1}, std::nullopt);
  std::vector<char> q(kRows * kCols);
  std::mt19937 rng(3);
  for (auto& v : q) v = static_cast<char>(rng());
  std::vector<float> scales = {1e-3f, 2e-3f, 0.5f, 3.0f, 1e-6f, 7.0f};
  std::vector<char> s(24);
  std::memcpy(s.data(), scales.data(), 24);
  std::map<std::string, std::vector<char>> in = {
      {kWeight, q},
      {kScale, s},
      {"model.norm.weight", RandomFloats(kCols, FloatType::kBFloat16, 4)}};
  Memory out;
  ASSERT_OK(RunConverting(source, in, target, &out, true));
  std::map<std::string, std::vector<char>> expected = {
      {"model.norm.weight", in["model.norm.weight"]}};
  expected[kWeight].assign(kRows * kCols * 2, 0);
  internal::DequantizeE4m3Blocks(reinterpret_cast<const uint8_t*>(q.data()),
                                 {kRows, kCols, kCols}, 128, 128, scales.data(),
                                 2, FloatType::kBFloat16,
                                 expected[kWeight].data(), kCols);
  ExpectHolds(target, out, expected);

  const auto half = Layout(1, {"float16", 2, -1}, std::nullopt);
  const auto bf16 = Layout(2, {"bfloat16", 2, 0}, std::nullopt);
  in = {{kWeight, RandomFloats(kRows * kCols, FloatType::kFloat16, 5)},
        {"model.norm.weight", RandomFloats(kCols, FloatType::kBFloat16, 6)}};
  ASSERT_OK(RunConverting(half, in, bf16, &out, true));
  expected = in;
  internal::CastElements(FloatType::kFloat16, in[kWeight].data(),
                         FloatType::kBFloat16, expected[kWeight].data(),
                         kRows * kCols);
  ExpectHolds(bf16, out, expected);
}

// Finding (issue 58): dequantizing into TP shards that split FP8 blocks
// was refused, although only quantizing needs whole blocks. The target's
// shards split blocks (TP 2 and 3 on the 300 rows, TP 4 on the 256
// columns); every element must be float32(q) * the scale of its own block
// of the weight's grid, rounded to the target dtype: the expected bytes
// are computed here element by element with the scalar conversions.
TEST(ConvertReshardTest, DequantizingIntoTpShardsThatSplitBlocks) {
  struct Case {
    int64_t tp;
    Tensor target, scale;  // tp_dim: the split of the target's weight
  };
  const Case cases[] = {
      {2, {"bfloat16", 2, 0}, {"float32", 4, -1}},
      {3, {"float16", 2, 0}, {"float16", 2, -1}},
      {4, {"float32", 4, 1}, {"bfloat16", 2, -1}},
  };
  std::vector<char> q(kRows * kCols);
  std::mt19937 rng(7);
  for (auto& v : q) v = static_cast<char>(rng());
  const std::vector<float> values = {1e-3f, 2e-3f, 0.5f, 3.0f, 1e-6f, 7.0f};
  for (const Case& c : cases) {
    SCOPED_TRACE("tp " + std::to_string(c.tp) + " " + c.target.dtype);
    const FloatType scale_type = *internal::FloatTypeOf(c.scale.dtype);
    const FloatType to = *internal::FloatTypeOf(c.target.dtype);
    std::vector<char> s(6 * c.scale.itemsize);
    internal::CastElements(FloatType::kFloat32, values.data(), scale_type,
                           s.data(), 6);
    const auto source = Layout(1, {"float8_e4m3fn", 1, -1}, c.scale);
    const auto target = Layout(c.tp, c.target, std::nullopt);
    std::map<std::string, std::vector<char>> in = {
        {kWeight, q},
        {kScale, s},
        {"model.norm.weight", RandomFloats(kCols, FloatType::kBFloat16, 8)}};
    Memory out;
    ASSERT_OK(RunConverting(source, in, target, &out, true));
    // The reference: element (r, c) with the scale of block
    // (r / 128, c / 128), widened exactly to float32.
    std::vector<char> want(kRows * kCols * c.target.itemsize);
    for (int64_t r = 0; r < kRows; ++r) {
      for (int64_t k = 0; k < kCols; ++k) {
        const int64_t b = (r / 128) * 2 + k / 128;
        float scale = 0;
        internal::CastElements(scale_type, s.data() + b * c.scale.itemsize,
                               FloatType::kFloat32, &scale, 1);
        const float y =
            internal::E4m3ToFloat(static_cast<uint8_t>(q[r * kCols + k])) *
            scale;
        char* at = want.data() + (r * kCols + k) * c.target.itemsize;
        if (to == FloatType::kFloat32) {
          std::memcpy(at, &y, 4);
        } else {
          const uint16_t h = to == FloatType::kBFloat16
                                 ? internal::FloatToBFloat16(y)
                                 : internal::FloatToFloat16(y);
          std::memcpy(at, &h, 2);
        }
      }
    }
    ExpectHolds(
        target, out,
        {{kWeight, want}, {"model.norm.weight", in["model.norm.weight"]}});
    // Each shard splits a block: the plan stages the whole scale tensor on
    // every participant.
    ASSERT_OK_AND_ASSIGN(
        auto plan,
        ConversionPlan::Make(ConversionPlan::LookupIn(source), target));
    for (const auto& part : plan.staging().parts()) {
      int scales = 0;
      for (const auto& f : part.fragments()) {
        if (f.tensor_id() != kScale) continue;
        ++scales;
        EXPECT_EQ(f.global_offset(), (Dims{0, 0}));
        EXPECT_EQ(f.local_shape(), (Dims{3, 2}));
      }
      EXPECT_EQ(scales, 1) << part.participant_id();
    }
  }
}

TEST(ConvertReshardTest, RefusalsNameTheTensor) {
  const auto bf16 = Layout(1, {"bfloat16", 2, -1}, std::nullopt);
  // TP2 on rows splits block row 1 (rows 128-255) at row 150.
  const auto split =
      Layout(2, {"float8_e4m3fn", 1, 0}, Tensor{"float32", 4, -1});
  EXPECT_THAT(LogicalTransferPlan::Make(bf16, split, {.convert = true}),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("cannot convert tensor " + kWeight +
                                 ": block [1, 0] of 128x128 is split")));
  const auto no_scale = Layout(2, {"float8_e4m3fn", 1, 1}, std::nullopt);
  EXPECT_THAT(
      LogicalTransferPlan::Make(bf16, no_scale, {.convert = true}),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("the target lacks its scale tensor " + kScale)));
  const auto fp8 = Layout(2, {"float8_e4m3fn", 1, 1}, Tensor{"float32", 4, 1});
  PlanOptions other_block{.convert = true};
  other_block.fp8_block = {64, 64};
  EXPECT_THAT(LogicalTransferPlan::Make(bf16, fp8, other_block),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("but blocks of 64x64 make float32 [5, 4]")));
  // Produced scales are float32; 16-bit ones are read (dequantizing) only.
  const auto bf16_scale =
      Layout(2, {"float8_e4m3fn", 1, 1}, Tensor{"bfloat16", 2, 1});
  EXPECT_THAT(LogicalTransferPlan::Make(bf16, bf16_scale, {.convert = true}),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("(target) is bfloat16, not float32")));
  const auto ints = Layout(1, {"int16", 2, -1}, std::nullopt);
  EXPECT_THAT(LogicalTransferPlan::Make(
                  ints, Layout(1, {"bfloat16", 2, -1}, std::nullopt),
                  {.convert = true}),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("no rule converts int16 (source)")));
  const auto no_source_scale =
      Layout(1, {"float8_e4m3fn", 1, -1}, std::nullopt);
  EXPECT_THAT(
      LogicalTransferPlan::Make(no_source_scale, bf16, {.convert = true}),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("the source lacks its scale tensor")));
}

// Quantization at the source: the TP2 source (columns 128 each, whole
// blocks) quantizes into buffers of its own, bound in the quantized
// placement; every byte as the kernels give for the whole tensor; a plain
// reshard of those into the FP8 target needs no conversion.
TEST(SourceQuantizationTest, QuantizesEachFragmentIntoItsOwnBuffers) {
  const auto source = Layout(2, {"bfloat16", 2, 1}, std::nullopt);
  const auto target =
      Layout(2, {"float8_e4m3fn", 1, 0}, Tensor{"float32", 4, -1});
  std::map<std::string, std::vector<char>> in = {
      {kWeight, RandomFloats(kRows * kCols, FloatType::kBFloat16, 9)},
      {"model.norm.weight", RandomFloats(kCols, FloatType::kBFloat16, 10)}};
  Memory src = Allocate(source, in, "src");
  auto q = Must(SourceQuantization::Make(source, target, src.bindings));
  ASSERT_TRUE(q.quantizes());
  ASSERT_OK(q.CheckQuantizesAll(target));
  EXPECT_EQ(q.buffer_bytes(), uint64_t{kRows * kCols + 6 * 4});
  EXPECT_EQ(q.placement().FindTensor(kWeight)->dtype(), "float8_e4m3fn");
  ASSERT_EQ(q.bindings().size(), 2u);
  ASSERT_OK(q.Quantize(2));
  // The rows split at 150 in the target: only the source could quantize.
  Memory out = Allocate(target, {}, "dst");
  ASSERT_OK(Reshard(q.placement(), q.bindings(), target, out.bindings));
  std::map<std::string, std::vector<char>> expected = in;
  expected[kWeight].assign(kRows * kCols, 0);
  expected[kScale].assign(6 * 4, 0);
  internal::QuantizeE4m3Blocks(
      FloatType::kBFloat16, in[kWeight].data(), {kRows, kCols, kCols}, 128, 128,
      reinterpret_cast<uint8_t*>(expected[kWeight].data()), kCols,
      reinterpret_cast<float*>(expected[kScale].data()), 2);
  ExpectHolds(target, out, expected);
  // New values, new buffers of the caller: Rebind and quantize again.
  in[kWeight] = RandomFloats(kRows * kCols, FloatType::kBFloat16, 11);
  Memory moved = Allocate(source, in, "src");
  ASSERT_OK(q.Rebind(moved.bindings));
  ASSERT_OK(q.Quantize(1));
  ASSERT_OK(Reshard(q.placement(), q.bindings(), target, out.bindings));
  internal::QuantizeE4m3Blocks(
      FloatType::kBFloat16, in[kWeight].data(), {kRows, kCols, kCols}, 128, 128,
      reinterpret_cast<uint8_t*>(expected[kWeight].data()), kCols,
      reinterpret_cast<float*>(expected[kScale].data()), 2);
  ExpectHolds(target, out, expected);
}

TEST(SourceQuantizationTest, WhatCannotQuantizeAtTheSourceIsNamed) {
  // TP4 over 256 columns: 64 each, half blocks.
  const auto split = Layout(4, {"bfloat16", 2, 1}, std::nullopt);
  const auto target =
      Layout(2, {"float8_e4m3fn", 1, 1}, Tensor{"float32", 4, 1});
  Memory src = Allocate(split, {}, "src");
  auto q = Must(SourceQuantization::Make(split, target, src.bindings));
  EXPECT_FALSE(q.quantizes());
  EXPECT_EQ(q.placement().placement_id(), split.placement_id());
  EXPECT_THAT(q.CheckQuantizesAll(target),
              StatusIs(StatusCode::kInvalidArgument,
                       "cannot quantize tensor " + kWeight +
                           " at the source: a source fragment of it does not "
                           "hold whole 128x128 blocks (or has aliases)"));
  // A quantizing fragment in strided memory is refused, naming it.
  const auto whole = Layout(1, {"bfloat16", 2, -1}, std::nullopt);
  Memory one = Allocate(whole, {}, "src");
  const auto& binding = one.bindings.front();
  std::vector<RuntimeBindingFragment> fragments;
  std::string weight_id;
  for (const auto& f : binding.fragments()) {
    RuntimeBindingFragmentSpec spec = internal::SpecOf(f);
    spec.device = "cuda:0";
    if (whole.FindFragment(f.placement_fragment_id())->tensor_id() == kWeight) {
      weight_id = f.placement_fragment_id();
    }
    fragments.push_back(Must(RuntimeBindingFragment::Make(std::move(spec))));
  }
  auto on_device = Must(WeightRuntimeBindingManifest::Make(
      {binding.resource_id(), binding.placement_id(),
       binding.placement_digest(), binding.instance_id(), binding.generation(),
       binding.lease_id(), binding.revision(), binding.participant_id(),
       std::move(fragments)}));
  EXPECT_THAT(SourceQuantization::Make(whole, target, {on_device}),
              StatusIs(StatusCode::kInvalidArgument,
                       "quantizing needs contiguous host memory: source "
                       "fragment " +
                           weight_id + " of " + binding.participant_id()));
}

}  // namespace
}  // namespace reshard
