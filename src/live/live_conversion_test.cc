// Conversions in live sessions (LiveSessionOptions::convert): the wire
// placements (FP8 quantized at the source where every source fragment
// holds whole blocks, target-side staging otherwise), and live reshards
// between real processes over UCX that quantize, dequantize and cast, every
// target byte checked against the pattern converted independently of the
// path (ConvertedPatternCheck), with about half the bytes on the wire.

#include "live/live_conversion.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "reshard/conversion.h"
#include "reshard/placement.h"
#include "selftest/converted_pattern.h"
#include "selftest/host_buffers.h"
#include "selftest/pattern.h"
#include "selftest/selftest.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::AddTensor;
using ::reshard::testing::GridDraft;
using ::reshard::testing::Must;
using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int64_t kRows = 300, kCols = 512;  // rows: two blocks and 44
const std::string kWeight = "model.layers.0.mlp.up_proj.weight";
const std::string kScale = "model.layers.0.mlp.up_proj.weight_scale_inv";
const std::string kNorm = "model.norm.weight";
// A bfloat16 TP4 source into a TP2 FP8 target over rows: what crosses.
constexpr uint64_t kFp8WireBytes = kRows * kCols + 2 * (12 * 4) + 2 * kCols * 2;

// TP `tp` over the weight's dim `tp_dim` (-1: replicated), in `dtype`, with
// its scale tensor when FP8; a float16 norm when `half_norm`.
WeightPlacementManifest Layout(int64_t tp, std::string dtype, int64_t tp_dim,
                               bool half_norm = false) {
  auto draft = GridDraft({1, 1, 1, tp});
  const bool fp8 = dtype == "float8_e4m3fn";
  const int64_t itemsize = fp8                                        ? 1
                           : (dtype == "float32" || dtype == "int32") ? 4
                                                                      : 2;
  AddTensor(&draft, {.tensor_id = kWeight,
                     .shape = {kRows, kCols},
                     .dtype = dtype,
                     .itemsize = itemsize,
                     .tp_dim = tp_dim});
  AddTensor(&draft, {.tensor_id = kNorm,
                     .shape = {kCols},
                     .dtype = half_norm ? "float16" : "bfloat16",
                     .itemsize = 2});
  if (fp8) {
    AddTensor(&draft, {.tensor_id = kScale,
                       .shape = {3, 4},
                       .dtype = "float32",
                       .itemsize = 4,
                       // Rows of blocks do not split evenly: replicated.
                       .tp_dim = tp_dim == 1 ? 1 : -1});
  }
  return Must(draft.Build());
}

// Over UCX between processes, or the in-process exchange between threads.
SelfTestOptions LiveConverting(uint32_t updates = 0,
                               const std::string& transport = "ucx") {
  SelfTestOptions o;
  o.transport = transport;
  o.procs = 2;
  o.timeout = std::chrono::seconds(30);
  o.measure_memcpy = false;
  o.convert = true;
  o.updates = updates;
  return o;
}

TEST(LiveConversionTest, SourceQuantizesWhereItsFragmentsHoldWholeBlocks) {
  // TP4 over 512 columns: 128 each, whole blocks.
  const auto source = Layout(4, "bfloat16", 1);
  const auto target = Layout(2, "float8_e4m3fn", 0);  // rows split at 150
  const auto wire = Must(QuantizedSourcePlacement(source, target));
  EXPECT_NE(wire.placement_id(), source.placement_id());
  EXPECT_EQ(wire.FindTensor(kWeight)->dtype(), "float8_e4m3fn");
  EXPECT_EQ(wire.FindTensor(kScale)->global_shape(), (Dims{3, 4}));
  EXPECT_EQ(wire.FindTensor(kNorm)->dtype(), "bfloat16");
  for (const WeightPlacementPart& part : wire.parts()) {
    const PlacementFragment* weight = nullptr;
    const PlacementFragment* scale = nullptr;
    for (const PlacementFragment& f : part.fragments()) {
      if (f.tensor_id() == kWeight) weight = &f;
      if (f.tensor_id() == kScale) scale = &f;
      if (f.tensor_id() == kNorm) {
        // Untouched fragments keep their identity.
        EXPECT_NE(source.FindFragment(f.placement_fragment_id()), nullptr);
      }
    }
    ASSERT_NE(weight, nullptr);
    ASSERT_NE(scale, nullptr);
    EXPECT_EQ(weight->nbytes(), uint64_t{kRows * 128});
    EXPECT_EQ(scale->global_offset(),
              (Dims{0, weight->global_offset()[1] / 128}));
    EXPECT_EQ(scale->local_shape(), (Dims{3, 1}));
    EXPECT_EQ(scale->nbytes(), 12u);
  }
  // TP8 over 512 columns: 64 each, blocks split: the target converts.
  const auto split = Layout(8, "bfloat16", 1);
  EXPECT_EQ(Must(QuantizedSourcePlacement(split, target)).placement_id(),
            split.placement_id());
  // Another block size than the target's scale tensor: nothing qualifies.
  ConversionOptions other;
  other.block = {64, 64};
  EXPECT_EQ(
      Must(QuantizedSourcePlacement(source, target, other)).placement_id(),
      source.placement_id());
}

TEST(LiveConversionTest, WirePlacementsOfEachRule) {
  // Source quantization leaves nothing to convert at the target.
  auto q = Must(live_internal::LiveConversion::Make(
      Layout(4, "bfloat16", 1), Layout(2, "float8_e4m3fn", 0), {}, {}));
  EXPECT_TRUE(q->quantizes_at_source());
  EXPECT_EQ(q->wire_target().FindTensor(kWeight)->dtype(), "float8_e4m3fn");
  // Split blocks at the source: bfloat16 travels, the target quantizes.
  auto t = Must(live_internal::LiveConversion::Make(
      Layout(8, "bfloat16", 1), Layout(2, "float8_e4m3fn", 1), {}, {}));
  EXPECT_FALSE(t->quantizes_at_source());
  EXPECT_EQ(t->wire_target().FindTensor(kWeight)->dtype(), "bfloat16");
  EXPECT_EQ(t->wire_target().FindTensor(kScale), nullptr);
  // Dequantization: FP8 and scales travel, the target converts.
  auto d = Must(live_internal::LiveConversion::Make(
      Layout(2, "float8_e4m3fn", 1), Layout(4, "bfloat16", 1), {}, {}));
  EXPECT_FALSE(d->quantizes_at_source());
  EXPECT_EQ(d->wire_target().FindTensor(kWeight)->dtype(), "float8_e4m3fn");
  EXPECT_EQ(d->wire_target().FindTensor(kScale)->dtype(), "float32");
  // No rule: refused naming the tensor.
  EXPECT_THAT(live_internal::LiveConversion::Make(
                  Layout(2, "bfloat16", 1), Layout(2, "int32", 1), {}, {}),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("cannot convert tensor " + kWeight)));
}

TEST(LiveConversionTest, LiveQuantizationAtTheSourceHalvesTheWire) {
  const auto source = Layout(4, "bfloat16", 1, /*half_norm=*/true);
  const auto target = Layout(2, "float8_e4m3fn", 0);
  for (const std::string transport : {"ucx", "inproc"}) {
    SCOPED_TRACE(transport);
    const auto r =
        Must(RunSelfTest(source, target, LiveConverting(0, transport)));
    EXPECT_TRUE(r.verified) << r.mismatch;
    ASSERT_EQ(r.wire_bytes.size(), 1u);
    // The FP8 weight once, the float32 scales and the float16 norm (cast at
    // the target) to both target participants.
    EXPECT_EQ(r.wire_bytes[0], kFp8WireBytes);
    // The same update in bfloat16 would carry the weight in bfloat16.
    EXPECT_LE(r.wire_bytes[0],
              uint64_t{(kRows * kCols + 2 * kCols) * 2} * 55 / 100);
  }
}

TEST(LiveConversionTest, StandingSessionsConvertEveryUpdate) {
  for (const std::string transport : {"ucx", "inproc"}) {
    SCOPED_TRACE(transport);
    // Quantization at the source, updates 1..3 each with its own pattern.
    const auto r = Must(RunSelfTest(Layout(4, "bfloat16", 1),
                                    Layout(2, "float8_e4m3fn", 0),
                                    LiveConverting(/*updates=*/3, transport)));
    EXPECT_TRUE(r.verified) << r.mismatch;
    ASSERT_EQ(r.wire_bytes.size(), 3u);
    for (uint64_t w : r.wire_bytes) {
      EXPECT_EQ(w, kFp8WireBytes);
    }
    // Quantization at the target (split blocks at the source), a cast.
    const auto t = Must(RunSelfTest(Layout(8, "bfloat16", 1, true),
                                    Layout(2, "float8_e4m3fn", 1),
                                    LiveConverting(/*updates=*/2, transport)));
    EXPECT_TRUE(t.verified) << t.mismatch;
    // Dequantization at the target.
    const auto d =
        Must(RunSelfTest(Layout(2, "float8_e4m3fn", 1), Layout(4, "float32", 1),
                         LiveConverting(/*updates=*/2, transport)));
    EXPECT_TRUE(d.verified) << d.mismatch;
  }
}

// The check the self-tests run can fail: targets left zero are named.
TEST(LiveConversionTest, ConvertedPatternCheckNamesTheFirstWrongByte) {
  const auto source = Layout(1, "bfloat16", -1, /*half_norm=*/true);
  const auto target = Layout(2, "float8_e4m3fn", 1);
  SelfTestOptions local;
  local.convert = true;
  local.measure_memcpy = false;
  const auto r = Must(RunSelfTest(source, target, local));
  EXPECT_TRUE(r.verified) << r.mismatch;
  const auto zeros = Must(internal::AllocateHostBuffers(target, "zeros"));
  for (const auto* f : target.fragments()) {
    std::memset(zeros.data.at(f->placement_fragment_id()), 0, f->nbytes());
  }
  const auto check = Must(
      internal::ConvertedPatternCheck::Make(source, target, Fp8Block{}, zeros));
  EXPECT_THAT(check->Verify(internal::TensorIndex(source), 0),
              ::testing::StartsWith("tensor " + kWeight + ", fragment "));
}

TEST(LiveConversionTest, WithoutConvertTheDtypeDifferenceIsRefused) {
  SelfTestOptions o = LiveConverting();
  o.convert = false;
  EXPECT_THAT(
      RunSelfTest(Layout(4, "bfloat16", 1), Layout(2, "float8_e4m3fn", 0), o),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("tensor descriptor mismatch: " + kWeight +
                         ": dtype bfloat16 (source) vs float8_e4m3fn "
                         "(target)")));
}

}  // namespace
}  // namespace reshard
