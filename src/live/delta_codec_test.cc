// Delta messages: every change fraction round-trips bit for bit in its
// smallest form, and malformed messages are refused naming what is wrong.

#include "live/delta_codec.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include "testing/status_testing.h"

namespace reshard::live_internal {
namespace {

using ::reshard::testing::StatusIs;

// `base` with a fraction of its elements changed (deterministic).
std::vector<uint8_t> Changed(const std::vector<uint8_t>& base, uint32_t item,
                             double fraction, uint32_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> now = base;
  for (size_t e = 0; e < base.size() / item; ++e) {
    if (std::uniform_real_distribution<double>(0, 1)(rng) >= fraction) {
      continue;
    }
    now[e * item] ^= 0x5A;  // at least one byte of the element differs
  }
  return now;
}

// Encodes one message of the regions, decodes it into `target` copies of
// the bases; returns the message.
std::vector<uint8_t> RoundTrip(std::vector<std::vector<uint8_t>> now,
                               std::vector<std::vector<uint8_t>>* base,
                               std::vector<std::vector<uint8_t>>* target,
                               const std::vector<uint32_t>& items,
                               std::vector<DeltaMode>* modes) {
  std::vector<uint8_t> message;
  BeginDeltaMessage(static_cast<uint32_t>(now.size()), 7, &message);
  std::vector<uint64_t> sizes;
  for (size_t i = 0; i < now.size(); ++i) {
    uint64_t changed = 0;
    EncodeDeltaRegion(now[i].data(), (*base)[i].data(), now[i].size(), items[i],
                      &message, &changed);
    EXPECT_EQ((*base)[i], now[i]);
    sizes.push_back(now[i].size());
  }
  EXPECT_OK(DecodeDeltaMessage(
      message.data(), message.size(), 7, sizes, items,
      [&](size_t r, uint64_t offset, const uint8_t* bytes, uint64_t n) {
        std::memcpy((*target)[r].data() + offset, bytes, n);
      },
      modes));
  for (size_t i = 0; i < now.size(); ++i) EXPECT_EQ((*target)[i], now[i]);
  return message;
}

TEST(DeltaCodecTest, EveryFractionRoundTripsInItsSmallestForm) {
  for (uint32_t item : {1u, 2u, 4u, 16u}) {
    std::vector<uint8_t> base(item * 10007);
    for (size_t i = 0; i < base.size(); ++i)
      base[i] = static_cast<uint8_t>(i * 31);
    struct Case {
      double fraction;
      DeltaMode mode;
      double max_ratio;  // of the region's bytes, headers included
    };
    for (const Case& c :
         {Case{0, DeltaMode::kRuns, 0.01}, Case{0.01, DeltaMode::kRuns, 0.05},
          Case{0.6, DeltaMode::kBitmap, 0.75},
          Case{1, DeltaMode::kRaw, 1.01}}) {
      SCOPED_TRACE(std::to_string(item) + " bytes, fraction " +
                   std::to_string(c.fraction));
      std::vector<std::vector<uint8_t>> b{base}, t{base};
      std::vector<DeltaMode> modes;
      const auto message = RoundTrip({Changed(base, item, c.fraction, item)},
                                     &b, &t, {item}, &modes);
      ASSERT_EQ(modes.size(), 1u);
      EXPECT_EQ(modes[0], c.mode);
      EXPECT_LE(message.size(), c.max_ratio * base.size() + 32);
    }
  }
}

// Every scan (AVX-512 where the CPU has it, the portable loop) writes the
// same message for regions of any length fed in pieces of any size, leaves
// the base equal to the region and hashes it; decoding straight into a
// contiguous target or through the callback lands the same bytes.
TEST(DeltaCodecTest, ScansAndDecodesAgreeOnEveryShape) {
  std::mt19937_64 rng(11);
  for (uint32_t item : {1u, 2u, 4u, 8u}) {
    for (uint64_t elements :
         {1ull, 31ull, 32ull, 33ull, 127ull, 1000ull, 40000ull}) {
      for (double fraction : {0.0, 0.002, 0.05, 0.5}) {
        SCOPED_TRACE(std::to_string(item) + " bytes x " +
                     std::to_string(elements) + ", fraction " +
                     std::to_string(fraction));
        const uint64_t n = item * elements;
        std::vector<uint8_t> old(n);
        for (uint64_t i = 0; i < n; ++i) old[i] = static_cast<uint8_t>(rng());
        const std::vector<uint8_t> now =
            Changed(old, item, fraction, static_cast<uint32_t>(rng()));
        uint64_t expected_changed = 0;
        for (uint64_t e = 0; e < elements; ++e) {
          expected_changed +=
              std::memcmp(&old[e * item], &now[e * item], item) != 0;
        }
        std::vector<std::vector<uint8_t>> messages;
        for (DeltaScan scan : {DeltaScan::kBest, DeltaScan::kPortable}) {
          std::vector<uint8_t> base = old, message;
          DeltaRegionEncoder encoder(
              base.data(), n, item, XXH3_64bits(old.data(), n), &message, scan);
          for (uint64_t at = 0; at < n;) {
            const uint64_t piece = std::min<uint64_t>(
                n - at, item * (1 + rng() % (elements / 3 + 1)));
            encoder.Piece(now.data() + at, at, piece);
            at += piece;
          }
          uint64_t changed = 0, hash = 0;
          (void)encoder.Finish(&changed, &hash);
          EXPECT_EQ(changed, expected_changed);
          EXPECT_EQ(hash, XXH3_64bits(now.data(), n));
          EXPECT_EQ(base, now);
          messages.push_back(std::move(message));
        }
        ASSERT_EQ(messages[0], messages[1]);
        std::vector<uint8_t> message;
        BeginDeltaMessage(1, 5, &message);
        message.insert(message.end(), messages[0].begin(), messages[0].end());
        std::vector<uint8_t> direct_target = old, apply_target = old;
        std::vector<uint8_t*> direct{direct_target.data()};
        std::vector<DeltaMode> modes;
        EXPECT_OK(DecodeDeltaMessage(
            message.data(), message.size(), 5, {n}, {item},
            [](size_t, uint64_t, const uint8_t*, uint64_t) {
              ADD_FAILURE() << "a direct region called apply";
            },
            &modes, &direct));
        EXPECT_OK(DecodeDeltaMessage(
            message.data(), message.size(), 5, {n}, {item},
            [&](size_t, uint64_t offset, const uint8_t* bytes, uint64_t len) {
              std::memcpy(apply_target.data() + offset, bytes, len);
            },
            &modes));
        EXPECT_EQ(direct_target, now);
        EXPECT_EQ(apply_target, now);
        // The base check sees the old bytes' hash (a raw region is not
        // checked); a target holding another base keeps its bytes.
        const uint64_t old_hash = XXH3_64bits(old.data(), n);
        std::vector<uint8_t> checked = old, refused = old;
        std::vector<uint8_t*> into_checked{checked.data()},
            into_refused{refused.data()};
        int checks = 0;
        const DeltaBase accept = [&](size_t r, uint64_t hash) {
          ++checks;
          EXPECT_EQ(r, 0u);
          EXPECT_EQ(hash, old_hash);
          return true;
        };
        const DeltaBase refuse = [](size_t, uint64_t) { return false; };
        auto none = [](size_t, uint64_t, const uint8_t*, uint64_t) {};
        EXPECT_OK(DecodeDeltaMessage(message.data(), message.size(), 5, {n},
                                     {item}, none, &modes, &into_checked,
                                     &accept));
        EXPECT_EQ(checked, now);
        const bool raw = modes[0] == DeltaMode::kRaw;
        EXPECT_EQ(checks, raw ? 0 : 1);
        EXPECT_OK(DecodeDeltaMessage(message.data(), message.size(), 5, {n},
                                     {item}, none, &modes, &into_refused,
                                     &refuse));
        EXPECT_EQ(refused, raw ? now : old);
      }
    }
  }
}

// An empty region (raw, no payload) has no piece to apply: the callback is
// never called with zero bytes (a memcpy to an empty buffer's null data).
TEST(DeltaCodecTest, EmptyRegionsApplyNothing) {
  std::vector<uint8_t> message;
  BeginDeltaMessage(2, 1, &message);
  EncodeRawRegion(nullptr, 0, &message);
  EncodeUnchangedRegion(0, &message);
  std::vector<DeltaMode> modes;
  int calls = 0;
  EXPECT_OK(DecodeDeltaMessage(
      message.data(), message.size(), 1, {0, 0}, {2, 2},
      [&](size_t, uint64_t, const uint8_t*, uint64_t) { ++calls; }, &modes));
  EXPECT_EQ(calls, 0);
  EXPECT_THAT(modes, ::testing::ElementsAre(DeltaMode::kRaw, DeltaMode::kRuns));
}

TEST(DeltaCodecTest, RegionsOfOneMessageKeepTheirOwnForms) {
  std::vector<uint8_t> a(4096, 1), b(8000, 2), c(3, 9);
  std::vector<std::vector<uint8_t>> base{a, b, c}, target{a, b, c};
  auto now_b = Changed(b, 4, 0.5, 3);
  std::vector<DeltaMode> modes;
  RoundTrip({a, now_b, {8, 9, 10}}, &base, &target, {2, 4, 1}, &modes);
  EXPECT_THAT(modes,
              ::testing::ElementsAre(DeltaMode::kRuns, DeltaMode::kBitmap,
                                     DeltaMode::kRaw));
}

TEST(DeltaCodecTest, MalformedMessagesAreRefused) {
  std::vector<uint8_t> base(64, 0), now = base;
  now[10] = 1;
  std::vector<uint8_t> message;
  BeginDeltaMessage(1, 3, &message);
  uint64_t changed = 0;
  std::vector<uint8_t> copy = base;
  EncodeDeltaRegion(now.data(), copy.data(), 64, 1, &message, &changed);
  EXPECT_EQ(changed, 1u);
  auto decode = [&](std::vector<uint8_t> m, uint64_t generation,
                    std::vector<uint64_t> sizes = {64}) {
    std::vector<DeltaMode> modes;
    return DecodeDeltaMessage(
        m.data(), m.size(), generation, sizes,
        std::vector<uint32_t>(sizes.size(), 1),
        [](size_t, uint64_t, const uint8_t*, uint64_t) {}, &modes);
  };
  EXPECT_OK(decode(message, 3));
  EXPECT_THAT(decode(message, 4),
              StatusIs(StatusCode::kDataLoss,
                       "delta message on base generation 3, this target "
                       "holds generation 4"));
  EXPECT_THAT(decode(message, 3, {64, 64}),
              StatusIs(StatusCode::kDataLoss,
                       "malformed delta message: 1 regions, expected 2"));
  EXPECT_THAT(decode(message, 3, {8}),
              StatusIs(StatusCode::kDataLoss,
                       "malformed delta message: region 0 of the message: "
                       "run past the region's 8 elements"));
  auto bad = message;
  bad[0] ^= 1;
  EXPECT_THAT(decode(bad, 3), StatusIs(StatusCode::kDataLoss,
                                       "malformed delta message: no RSD1 "
                                       "header"));
  bad = message;
  bad.pop_back();
  EXPECT_THAT(decode(bad, 3),
              StatusIs(StatusCode::kDataLoss,
                       "malformed delta message: region 0 of the message: "
                       "payload past the message"));
  bad = message;
  bad.push_back(0);
  EXPECT_THAT(decode(bad, 3),
              StatusIs(StatusCode::kDataLoss,
                       "malformed delta message: 1 bytes after the last "
                       "region"));
  bad = message;
  bad[16] = 9;
  EXPECT_THAT(decode(bad, 3),
              StatusIs(StatusCode::kDataLoss,
                       "malformed delta message: region 0 of the message: "
                       "unknown mode 9"));
}

// A region fed in pieces (a strided source's rows) encodes to the same
// bytes as the whole region, leaves the same base, and reports the XXH3-64
// of that base; for element sizes with and without a word path, pieces that
// end inside a 32-byte block or a word, and change fractions from none to
// all.
TEST(DeltaCodecTest, PiecewiseEncodingMatchesTheWholeRegion) {
  std::mt19937_64 rng(36);
  for (uint32_t item : {1u, 2u, 3u, 4u, 8u, 6u}) {
    for (double fraction : {0.0, 0.01, 0.2, 0.7, 1.0}) {
      const uint64_t n = item * (1000 + rng() % 3000);
      std::vector<uint8_t> base(n);
      for (uint8_t& b : base) b = static_cast<uint8_t>(rng());
      const std::vector<uint8_t> now = Changed(base, item, fraction, 9);
      std::vector<uint8_t> whole_base = base, piece_base = base;
      std::vector<uint8_t> whole, pieces;
      uint64_t whole_changed = 0;
      const DeltaMode whole_mode = EncodeDeltaRegion(
          now.data(), whole_base.data(), n, item, &whole, &whole_changed);
      DeltaRegionEncoder encoder(piece_base.data(), n, item, 0, &pieces);
      for (uint64_t at = 0; at < n;) {
        const uint64_t len =
            std::min<uint64_t>(n - at, item * (1 + rng() % 40));
        encoder.Piece(now.data() + at, at, len);
        at += len;
      }
      uint64_t changed = 0, hash = 0;
      const DeltaMode mode = encoder.Finish(&changed, &hash);
      SCOPED_TRACE("item " + std::to_string(item) + ", fraction " +
                   std::to_string(fraction));
      EXPECT_EQ(mode, whole_mode);
      EXPECT_EQ(changed, whole_changed);
      EXPECT_EQ(pieces, whole);
      EXPECT_EQ(piece_base, now);
      EXPECT_EQ(whole_base, now);
      EXPECT_EQ(hash, XXH3_64bits(now.data(), n));
      if (fraction == 0.0) {
        EXPECT_EQ(changed, 0u);
        EXPECT_EQ(mode, DeltaMode::kRuns);
      }
      if (fraction == 1.0) {
        EXPECT_EQ(mode, DeltaMode::kRaw);
      }
    }
  }
}

}  // namespace
}  // namespace reshard::live_internal
