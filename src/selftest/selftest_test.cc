// The end-to-end self-test: every golden scenario that fits in memory and
// generated tiny-moe layouts verify byte for byte; the pattern is
// deterministic and discriminating; unsupported transports and plan errors
// are errors, not reports.

#include "selftest/selftest.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <simdjson.h>

#include <cstdint>
#include <random>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "reshard/fields.h"
#include "reshard/gen.h"
#include "reshard/placement.h"
#include "reshard/plan.h"
#include "selftest/host_buffers.h"
#include "selftest/live_selftest.h"
#include "selftest/pattern.h"
#include "testing/must.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard {
namespace {

using ::reshard::testing::Must;
using ::reshard::testing::ReadTestData;
using ::reshard::testing::StatusIs;

std::string Str(simdjson::dom::element e) {
  return std::string(std::string_view(e));
}

constexpr uint64_t kMaxScenarioBytes = uint64_t{64} << 20;

// Checks a verified report against the plan it ran.
void ExpectVerified(const SelfTestReport& report,
                    const LogicalTransferPlan& plan) {
  EXPECT_TRUE(report.verified);
  EXPECT_EQ(report.mismatch, "");
  EXPECT_EQ(report.bytes, plan.summary().bytes);
  EXPECT_EQ(report.operations, plan.regions().size());
  EXPECT_EQ(report.segments, plan.summary().segments);
  EXPECT_GE(report.plan_seconds, 0.0);
  EXPECT_GE(report.seconds, 0.0);
}

TEST(SelfTestTest, GoldenScenariosVerify) {
  const std::string text = ReadTestData("scenarios/expected.json");
  simdjson::dom::parser parser;
  simdjson::dom::element root = parser.parse(text);
  simdjson::dom::object plans = root["plans"];
  size_t ran = 0;
  size_t too_large = 0;
  size_t errors = 0;
  for (auto [key, value] : plans) {
    const std::string name(key);
    SCOPED_TRACE(name);
    simdjson::dom::element error;
    const bool expect_error = value["error"].get(error) == simdjson::SUCCESS;
    if (!expect_error) {
      const uint64_t bytes = uint64_t(value["bytes"]);
      if (bytes > kMaxScenarioBytes) {
        // Too large for a unit test's host memory and time budget.
        ++too_large;
        continue;
      }
    }
    const auto source = Must(WeightPlacementFromJson(
        ReadTestData("scenarios/" + Str(value["source"]))));
    const auto target = Must(WeightPlacementFromJson(
        ReadTestData("scenarios/" + Str(value["target"]))));
    auto report = RunSelfTest(source, target);
    if (expect_error) {
      // The planner's error comes through unchanged.
      ++errors;
      ASSERT_THAT(report, StatusIs(StatusCode::kInvalidArgument, Str(error)));
      continue;
    }
    ASSERT_OK(report);
    const auto plan = Must(LogicalTransferPlan::Make(source, target));
    ExpectVerified(*report, plan);
    EXPECT_EQ(report->bytes, uint64_t(value["bytes"]));
    EXPECT_EQ(report->operations, uint64_t(value["regions"]));
    EXPECT_EQ(report->segments, uint64_t(value["segments"]));
    ++ran;
  }
  EXPECT_GE(ran, 20u);
  EXPECT_EQ(too_large, 7u);
  EXPECT_EQ(errors, 1u);
}

ModelSpec TinyMoe() {
  return Must(
      ModelSpecFromJson(ReadTestData("../../examples/models/tiny-moe.json")));
}

// ExpertLayout, the former name of ExpertTensors, still compiles.
static_assert(std::is_same_v<ExpertLayout, ExpertTensors>);

TEST(SelfTestTest, GeneratedTinyMoeLayoutsVerify) {
  const ModelSpec model = TinyMoe();
  std::mt19937 rng(1234);
  const int64_t tps[] = {1, 2, 4, 8};
  const int64_t pps[] = {1, 2, 4};
  const int64_t eps[] = {1, 2, 4, 8};
  const int64_t dps[] = {1, 2, 3};
  // Grouped and separate experts are different tensor sets: both sides of
  // a pair store their experts alike.
  auto random_layout = [&](ExpertTensors experts) {
    LayoutOptions o;
    o.sizes.tp = tps[rng() % 4];
    o.sizes.pp = pps[rng() % 3];
    o.sizes.ep = eps[rng() % 4];
    o.sizes.dp = dps[rng() % 3];
    o.experts = experts;
    return o;
  };
  auto describe = [](const LayoutOptions& o) {
    return "tp" + std::to_string(o.sizes.tp) + " pp" +
           std::to_string(o.sizes.pp) + " ep" + std::to_string(o.sizes.ep) +
           " dp" + std::to_string(o.sizes.dp) +
           (o.experts == ExpertTensors::kGrouped ? " grouped" : " separate");
  };
  size_t ran = 0;
  std::set<std::string> shapes;
  for (int i = 0; i < 30; ++i) {
    const ExpertTensors experts =
        rng() % 2 == 0 ? ExpertTensors::kGrouped : ExpertTensors::kSeparate;
    const LayoutOptions so = random_layout(experts);
    const LayoutOptions to = random_layout(experts);
    SCOPED_TRACE(describe(so) + " -> " + describe(to));
    auto source = GenerateLayout(model, so);
    auto target = GenerateLayout(model, to);
    // Every combination of these sizes divides tiny-moe's dimensions.
    ASSERT_OK(source);
    ASSERT_OK(target);
    const auto plan = Must(LogicalTransferPlan::Make(*source, *target));
    for (uint32_t threads : {1u, 3u}) {
      SCOPED_TRACE("threads " + std::to_string(threads));
      ASSERT_OK_AND_ASSIGN(
          auto report, RunSelfTest(*source, *target,
                                   {.transport = "local", .threads = threads}));
      ExpectVerified(report, plan);
    }
    shapes.insert(describe(so));
    ++ran;
  }
  EXPECT_EQ(ran, 30u);
  EXPECT_GT(shapes.size(), 20u);  // the combinations really vary
}

TEST(SelfTestTest, PatternIsDeterministicAndDiscriminating) {
  // Deterministic.
  for (uint64_t t : {0u, 1u, 7u}) {
    for (uint64_t e : {0u, 1u, 12345u}) {
      for (uint64_t b = 0; b < 16; ++b) {
        EXPECT_EQ(SelfTestPatternByte(t, e, b), SelfTestPatternByte(t, e, b));
      }
    }
  }
  auto word = [](uint64_t t, uint64_t e, uint64_t first_byte) {
    uint64_t w = 0;
    for (uint64_t b = 0; b < 8; ++b) {
      w = w << 8 | SelfTestPatternByte(t, e, first_byte + b);
    }
    return w;
  };
  // Elements: the 8-byte words of 10,000 elements of one tensor are
  // distinct, and so are a few tensors' words for the same element.
  std::set<uint64_t> words;
  for (uint64_t e = 0; e < 10000; ++e) words.insert(word(0, e, 0));
  EXPECT_EQ(words.size(), 10000u);
  size_t byte_differs = 0;
  for (uint64_t e = 0; e < 1000; ++e) {
    std::set<uint64_t> per_tensor;
    for (uint64_t t = 0; t < 4; ++t) per_tensor.insert(word(t, e, 0));
    EXPECT_EQ(per_tensor.size(), 4u) << "element " << e;
    byte_differs +=
        SelfTestPatternByte(0, e, 0) != SelfTestPatternByte(1, e, 0);
  }
  EXPECT_GT(byte_differs, 950u);  // single bytes collide only by chance
  // Bytes: within an element the bytes vary, and wide elements do not
  // repeat with an 8-byte period.
  for (uint64_t e = 0; e < 1000; ++e) {
    std::set<uint8_t> bytes;
    for (uint64_t b = 0; b < 8; ++b) bytes.insert(SelfTestPatternByte(2, e, b));
    EXPECT_GT(bytes.size(), 1u) << "element " << e;
    EXPECT_NE(word(2, e, 0), word(2, e, 8)) << "element " << e;
  }
  // Spot checks across all three arguments.
  EXPECT_NE(word(0, 0, 0), word(1, 0, 0));
  EXPECT_NE(word(0, 0, 0), word(0, 1, 0));
  EXPECT_NE(word(5, 99, 0), word(5, 99, 8));
}

// The pattern's values are part of what the self-test checks across
// processes and releases: these bytes were computed from its definition
// (docs: a SplitMix-style mix of element * golden ratio + tensor + 1, byte
// b = (h >> 8 (b % 8)) ^ (b / 8)) by an independent implementation. Whole
// elements written at once equal the bytes one by one, for every width.
TEST(SelfTestTest, PatternBytesAreTheDefinedOnesWhateverTheWidth) {
  struct Golden {
    uint64_t tensor, element;
    std::vector<uint8_t> bytes;
  };
  const std::vector<Golden> golden = {
      {0, 0, {15, 210, 164, 250, 193, 34, 222, 204, 14, 211}},
      {3, 12345, {180, 21, 251, 186, 116, 87, 47, 138, 181, 20}},
      {(uint64_t{7} << 32) + 5,
       987654321,
       {167, 30, 28, 194, 129, 27, 149, 208, 166, 31}},
  };
  for (const Golden& g : golden) {
    for (uint64_t b = 0; b < g.bytes.size(); ++b) {
      EXPECT_EQ(SelfTestPatternByte(g.tensor, g.element, b), g.bytes[b])
          << "element " << g.element << " byte " << b;
    }
    for (uint64_t width = 1; width <= g.bytes.size(); ++width) {
      std::vector<uint8_t> out(width + 1, 0xEE);
      SelfTestPatternElement(g.tensor, g.element, width, out.data());
      EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end() - 1),
                std::vector<uint8_t>(g.bytes.begin(), g.bytes.begin() + width))
          << "width " << width;
      EXPECT_EQ(out.back(), 0xEE) << "width " << width;  // nothing beyond
    }
  }
  for (uint64_t width : {16u, 20u, 33u}) {
    std::vector<uint8_t> out(width);
    SelfTestPatternElement(11, 77, width, out.data());
    for (uint64_t b = 0; b < width; ++b) {
      EXPECT_EQ(out[b], SelfTestPatternByte(11, 77, b)) << "byte " << b;
    }
  }
}

TEST(SelfTestTest, UnknownTransportsAreRejected) {
  const ModelSpec model = TinyMoe();
  const auto source = Must(GenerateLayout(model, {.sizes = {.tp = 2}}));
  const auto target = Must(GenerateLayout(model, {.sizes = {.tp = 4}}));
  auto report = RunSelfTest(source, target, {.transport = "rdma"});
  ASSERT_THAT(
      report,
      StatusIs(StatusCode::kUnimplemented,
               "transport \"rdma\" is not available for the self-test"));
  report = RunSelfTest(source, target, {.transport = ""});
  EXPECT_THAT(report,
              StatusIs(StatusCode::kUnimplemented,
                       "transport \"\" is not available for the self-test"));
  EXPECT_OK(RunSelfTest(source, target, {.transport = "local"}));
}

TEST(SelfTestTest, ErrorsPropagate) {
  const ModelSpec model = TinyMoe();
  const auto source = Must(GenerateLayout(model, {.sizes = {.tp = 2}}));
  const auto other_revision =
      Must(GenerateLayout(model, {.sizes = {.tp = 4}, .revision = "step-1"}));
  auto report = RunSelfTest(source, other_revision);
  ASSERT_THAT(report,
              StatusIs(StatusCode::kInvalidArgument,
                       "source and target revision differ: step-0 vs step-1"));
  const auto other_resource = Must(GenerateLayout(
      model, {.sizes = {.tp = 4}, .resource_id = "other-model"}));
  report = RunSelfTest(source, other_resource);
  EXPECT_THAT(
      report,
      StatusIs(
          StatusCode::kInvalidArgument,
          "source and target resource_id differ: tiny-moe vs other-model"));
  // The executor's option errors come through too.
  const auto target = Must(GenerateLayout(model, {.sizes = {.tp = 4}}));
  report = RunSelfTest(source, target, {.threads = 0});
  ASSERT_THAT(report, StatusIs(StatusCode::kInvalidArgument,
                               "local transport threads must be >= 1"));
}

// The verifier names the first wrong byte: its tensor, fragment, global
// element and byte, with the expected and the found value; a filled
// layout verifies, and so does it again after the byte is restored.
TEST(SelfTestTest, VerifyPatternNamesTheFirstWrongByte) {
  const WeightPlacementManifest m =
      Must(GenerateLayout(TinyMoe(), {.sizes = {.tp = 2}}));
  const auto tensors = internal::TensorIndex(m);
  auto buffers = Must(internal::AllocateHostBuffers(m, "pattern-test"));
  internal::FillPattern(m, tensors, buffers);
  EXPECT_EQ(internal::VerifyPattern(m, tensors, buffers), "");

  const PlacementFragment& f = *m.fragments()[1];
  const TensorDescriptor& t = *m.FindTensor(f.tensor_id());
  const auto item = static_cast<uint64_t>(t.itemsize());
  // The last byte of the fragment's first element: global element of
  // local index 0 is the row-major index of global_offset.
  uint64_t element = 0;
  for (size_t d = 0; d < t.ndim(); ++d) {
    element = element * static_cast<uint64_t>(t.global_shape()[d]) +
              static_cast<uint64_t>(f.global_offset()[d]);
  }
  uint8_t* byte = buffers.data.at(f.placement_fragment_id()) + item - 1;
  const uint8_t want =
      SelfTestPatternByte(tensors.at(f.tensor_id()), element, item - 1);
  ASSERT_EQ(*byte, want);
  *byte = static_cast<uint8_t>(want ^ 0x5A);
  EXPECT_EQ(internal::VerifyPattern(m, tensors, buffers),
            "tensor " + f.tensor_id() + ", fragment " +
                f.placement_fragment_id() + ", global element " +
                std::to_string(element) + ", byte " + std::to_string(item - 1) +
                ": expected " + std::to_string(want) + ", got " +
                std::to_string(static_cast<uint8_t>(want ^ 0x5A)));
  *byte = want;
  EXPECT_EQ(internal::VerifyPattern(m, tensors, buffers), "");
}

// A wrong byte anywhere in a long row is found and named, whichever
// chunk of the row's check it falls in (the check compares rows in
// chunks and searches a differing chunk byte by byte), with generations
// that change only some elements.
TEST(SelfTestTest, VerifyPatternFindsAWrongByteAnywhereInARow) {
  // Rows of 1,000 elements of 2 bytes and of 1 byte (the check compares
  // chunks of 256 elements).
  testing::PlacementDraft draft = testing::GridDraft({.tp = 2});
  testing::AddTensor(&draft,
                     {.tensor_id = "narrow", .shape = {4, 1000}, .tp_dim = 0});
  testing::AddTensor(&draft, {.tensor_id = "bytes",
                              .shape = {2, 1000},
                              .dtype = "uint8",
                              .itemsize = 1,
                              .tp_dim = 0});
  const WeightPlacementManifest m = Must(draft.Build());
  const auto tensors = internal::TensorIndex(m);
  auto buffers = Must(internal::AllocateHostBuffers(m, "pattern-row-test"));
  constexpr uint64_t kGeneration = 3;
  constexpr double kFraction = 0.25;
  internal::FillPattern(m, tensors, buffers, nullptr, kGeneration, kFraction);
  ASSERT_EQ(internal::VerifyPattern(m, tensors, buffers, nullptr, kGeneration,
                                    kFraction),
            "");
  // Each fragment's bytes are checked at local offsets across chunk
  // boundaries and at its very end.
  for (const PlacementFragment* f : m.fragments()) {
    const TensorDescriptor& t = *m.FindTensor(f->tensor_id());
    const auto item = static_cast<uint64_t>(t.itemsize());
    const uint64_t ti = tensors.at(f->tensor_id());
    ASSERT_GE(f->nbytes(), 600 * item);
    for (uint64_t at : {uint64_t{0}, 255 * item + item - 1, 256 * item,
                        300 * item + 1, f->nbytes() - 1}) {
      // The global row-major index of the element at this local offset.
      uint64_t local = at / item, element = 0;
      const Dims& shape = f->local_shape();
      Dims index(shape.size(), 0);
      for (size_t d = shape.size(); d-- > 0;) {
        index[d] =
            static_cast<int64_t>(local % static_cast<uint64_t>(shape[d]));
        local /= static_cast<uint64_t>(shape[d]);
      }
      for (size_t d = 0; d < shape.size(); ++d) {
        element = element * static_cast<uint64_t>(t.global_shape()[d]) +
                  static_cast<uint64_t>(f->global_offset()[d] + index[d]);
      }
      const uint64_t generation =
          SelfTestElementGeneration(ti, element, kGeneration, kFraction);
      const uint8_t want =
          SelfTestPatternByte(ti + (generation << 32), element, at % item);
      uint8_t* byte = buffers.data.at(f->placement_fragment_id()) + at;
      ASSERT_EQ(*byte, want) << "offset " << at;
      *byte = static_cast<uint8_t>(want ^ 0x01);
      EXPECT_EQ(internal::VerifyPattern(m, tensors, buffers, nullptr,
                                        kGeneration, kFraction),
                "tensor " + f->tensor_id() + ", fragment " +
                    f->placement_fragment_id() + ", global element " +
                    std::to_string(element) + ", byte " +
                    std::to_string(at % item) + ": expected " +
                    std::to_string(want) + ", got " +
                    std::to_string(static_cast<uint8_t>(want ^ 0x01)));
      *byte = want;
    }
  }
  EXPECT_EQ(internal::VerifyPattern(m, tensors, buffers, nullptr, kGeneration,
                                    kFraction),
            "");
}

// The launcher's deadline follows the work asked for: 3 x timeout for the
// session and as much again per update, saturating far below overflow.
TEST(LaunchDeadlineTest, SelftestTimeoutDeadlineScalesWithUpdates) {
  SelfTestOptions o;
  o.timeout = std::chrono::milliseconds(2000);
  EXPECT_EQ(internal::LaunchDeadline(o), std::chrono::milliseconds(6000));
  o.updates = 4;
  EXPECT_EQ(internal::LaunchDeadline(o), std::chrono::milliseconds(30000));
  o.timeout = std::chrono::milliseconds(86400000);
  o.updates = UINT32_MAX;
  EXPECT_EQ(internal::LaunchDeadline(o),
            std::chrono::milliseconds(int64_t{1} << 40));
}

// The names a report's visitor gives, in order, and those of them whose
// value is a list.
struct VisitedNames {
  std::vector<std::string> names;
  std::vector<std::string> lists;
};
VisitedNames NamesOf(const SelfTestReport& r) {
  VisitedNames out;
  VisitFields(r, [&out](const char* name, const auto& value) {
    out.names.push_back(name);
    if (kIsFieldList<std::decay_t<decltype(value)>>) {
      out.lists.push_back(name);
    }
  });
  return out;
}

// One record for every kind of run: the fields follow the transport,
// updates and delta, names sorted (what selftest --json prints).
TEST(SelfTestReportTest, FieldsFollowTheKindOfRun) {
  SelfTestReport r;
  r.transport = "local";
  const std::vector<std::string> local = {
      "bytes",        "gbps",    "memcpy_gbps", "mismatch",  "operations",
      "plan_seconds", "seconds", "segments",    "transport", "verified"};
  EXPECT_EQ(NamesOf(r).names, local);
  r.transport = "store";
  EXPECT_EQ(NamesOf(r).names,
            std::vector<std::string>(
                {"bytes", "gbps", "load_seconds", "memcpy_gbps", "mismatch",
                 "operations", "plan_seconds", "seconds", "segments",
                 "transport", "upload_seconds", "verified"}));
  r.transport = "inproc";
  VisitedNames live = NamesOf(r);
  EXPECT_EQ(live.names,
            std::vector<std::string>(
                {"bytes", "gbps", "memcpy_gbps", "messages", "mismatch",
                 "operations", "packed_messages", "plan_seconds", "procs",
                 "ranks_ready", "seconds", "segments", "transport", "verified",
                 "verified_regions", "verify_seconds", "wire_bytes"}));
  EXPECT_EQ(live.lists, std::vector<std::string>());
  r.transport = "ucx";
  r.updates = 3;
  VisitedNames updates = NamesOf(r);
  EXPECT_EQ(updates.names, std::vector<std::string>({"bytes",
                                                     "failed_updates",
                                                     "failures",
                                                     "fixed_seconds",
                                                     "gbps",
                                                     "memcpy_gbps",
                                                     "messages",
                                                     "mismatch",
                                                     "open_seconds",
                                                     "opens",
                                                     "operations",
                                                     "packed_messages",
                                                     "plan_seconds",
                                                     "procs",
                                                     "ranks_ready",
                                                     "rejoins",
                                                     "seconds",
                                                     "segments",
                                                     "transport",
                                                     "update_seconds",
                                                     "updates",
                                                     "verified",
                                                     "verified_regions",
                                                     "verify_seconds",
                                                     "wire_bytes"}));
  EXPECT_EQ(updates.lists, std::vector<std::string>(
                               {"failed_updates", "failures", "fixed_seconds",
                                "update_seconds", "verified_regions",
                                "verify_seconds", "wire_bytes"}));
  r.delta = true;
  VisitedNames delta = NamesOf(r);
  EXPECT_EQ(delta.names,
            std::vector<std::string>(
                {"apply_seconds",    "bytes",          "delta_regions",
                 "encode_seconds",   "failed_updates", "failures",
                 "fixed_seconds",    "full_regions",   "gbps",
                 "memcpy_gbps",      "messages",       "mismatch",
                 "open_seconds",     "opens",          "operations",
                 "packed_messages",  "plan_seconds",   "procs",
                 "ranks_ready",      "rejoins",        "seconds",
                 "segments",         "snapshot_bytes", "transport",
                 "update_seconds",   "updates",        "verified",
                 "verified_regions", "verify_seconds", "wire_bytes"}));
}

// The derived fields: bandwidth (0 without time) and each update's time
// past its bytes at the measured bandwidth (never negative).
TEST(SelfTestReportTest, DerivedFields) {
  SelfTestReport r;
  EXPECT_EQ(SelfTestGbps(r), 0);
  r.bytes = 3'000'000'000;
  r.seconds = 1.5;
  EXPECT_EQ(SelfTestGbps(r), 2.0);
  r.update_seconds = {2.0, 1.0, 1.75};
  EXPECT_EQ(SelfTestFixedSeconds(r), std::vector<double>({0.5, 0.0, 0.25}));
}

}  // namespace
}  // namespace reshard
