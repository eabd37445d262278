// The canonical parts reader: what it reads, every byte it refuses, and the
// decoder's two paths agreeing (canonical input read from its bytes, the
// rest by the general decoder) on identities, content and errors.

#include "contract/canonical_parts.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>

#include "contract/placement_wire.h"
#include "reshard/placement.h"
#include "testing/placement_builders.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using testing::ReadTestData;

// The first part object of a canonical placement wire.
std::string FirstPart(const std::string& wire) {
  const size_t begin = wire.find('[') + 1;
  const size_t end = wire.find("}},{\"fragments\":[", begin) + 2;
  return wire.substr(begin, end - begin);
}

const std::string& Fixture100() {
  static const std::string text =
      ReadTestData("fixtures/placements/placement_100.json");
  return text;
}

// Replaces the first occurrence of `from` in `text`.
std::string Replace(std::string text, const std::string& from,
                    const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

bool Reads(const std::string& part) {
  CanonicalPartsScanner scanner(part, 0);
  ScannedPart out;
  return scanner.ReadPart(&out) && scanner.offset(part) == part.size();
}

TEST(CanonicalPartsTest, ReadsAPartAsTheGeneralDecoderDoes) {
  ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(Fixture100()));
  const std::string part = FirstPart(Fixture100());
  CanonicalPartsScanner scanner(part, 0);
  ScannedPart out;
  ASSERT_TRUE(scanner.ReadPart(&out));
  EXPECT_EQ(scanner.offset(part), part.size());
  const WeightPlacementPart& expected = m.parts().front();
  EXPECT_EQ(out.participant_id, expected.participant_id());
  EXPECT_EQ(out.rank, expected.rank());
  ASSERT_EQ(out.fragments.size(), expected.fragments().size());
  for (size_t i = 0; i < out.fragments.size(); ++i) {
    EXPECT_EQ(out.fragments[i], expected.fragments()[i]) << i;
  }
}

TEST(CanonicalPartsTest, RefusesEveryNonCanonicalForm) {
  const std::string part = FirstPart(Fixture100());
  ASSERT_TRUE(Reads(part));
  const std::pair<std::string, std::string> cases[] = {
      {"\"nbytes\":32", "\"nbytes\":032"},
      {"\"nbytes\":32", "\"nbytes\":32.0"},
      {"\"nbytes\":32", "\"nbytes\":3e1"},
      {"\"nbytes\":32", "\"nbytes\": 32"},
      {"\"nbytes\":32", "\"nbytes\":-32"},
      {"\"nbytes\":32", "\"nbytes\":18446744073709551616"},
      {"\"global_offset\":[0", "\"global_offset\":[-0"},
      {"\"global_offset\":[0", "\"global_offset\":[9223372036854775808"},
      {"\"dp\":0", "\"dp\":-1"},
      {"\"dp\":0", "\"dp\":9223372036854775808"},
      {"\"tensor_id\":\"", "\"tensor_id\":\"\\u0041"},
      {"\\u00e9", "\\u00E9"},
      {"\\u00e9", "\\/"},
      {"\\u00e9", "\\u00"},
      {"\\u00e9", "\\x"},
      {"\"tensor_id\":\"", "\"tensor_id\":\"\t"},
      {"\"tensor_id\":\"", "\"tensor_id\":\"\xc3\xa9"},
      {"\"tensor_id\":\"", "\"tensor_id\":\"\x7f"},
      {"\"participant_id\":\"", "\"participant_id\":\"\"\"x"},
      {"\"aliases\":[]", "\"aliases\":[ ]"},
      {"\"aliases\":[]", "\"aliases\":[\"b\",\"a\"]"},
      {"\"aliases\":[]", "\"aliases\":[\"a\",\"a\"]"},
      {"\"aliases\":[]", "\"aliases\":[\"\"]"},
      {",\"placement_fragment_id\"",
       ",\"pipeline_stage_id\":null,\"placement_fragment_id\""},
      {",\"placement_fragment_id\"",
       ",\"pipeline_stage_id\":-1,\"placement_fragment_id\""},
      {"\"aliases\":[],", ""},
      {"{\"aliases\"", "{\"zz\":1,\"aliases\""},
      {"\"nbytes\":32,", "\"nbytes\":32,\"nbytes\":32,"},
      // A fragment that fails PlacementFragment::Make.
      {"\"local_shape\":[", "\"local_shape\":[0,"},
  };
  for (const auto& [from, to] : cases) {
    EXPECT_FALSE(Reads(Replace(part, from, to))) << from << " -> " << to;
  }
  // A part whose fragment ids are not in ascending order.
  ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(Fixture100()));
  const auto& frags = m.parts().front().fragments();
  ASSERT_GE(frags.size(), 2u);
  EXPECT_FALSE(Reads(Replace(part, frags[0].placement_fragment_id(),
                             frags[1].placement_fragment_id())));
  // Truncated anywhere.
  for (size_t n = 0; n < part.size(); n += 7) {
    EXPECT_FALSE(Reads(part.substr(0, n))) << n;
  }
}

TEST(CanonicalPartsTest, AcceptsTheWritersOptionalAndEdgeForms) {
  const std::string part = FirstPart(Fixture100());
  // The fixture's first part holds a tensor id with an escaped "\u00e9".
  ASSERT_NE(part.find("\\u00e9"), std::string::npos);
  EXPECT_TRUE(Reads(part));
  EXPECT_TRUE(Reads(Replace(part, "\\u00e9", "\\\"x\\\\\\n\\u001f")));
  // pipeline_stage_id present, zero and large integers in shortest form.
  EXPECT_TRUE(Reads(Replace(
      part, ",\"placement_fragment_id\"",
      ",\"pipeline_stage_id\":9223372036854775807,\"placement_fragment_id\"")));
  EXPECT_TRUE(
      Reads(Replace(part, ",\"placement_fragment_id\"",
                    ",\"pipeline_stage_id\":0,\"placement_fragment_id\"")));
}

// Occurrences of `what` in `text`.
size_t Count(std::string_view text, std::string_view what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string_view::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(CanonicalPartsTest, FindsBoundariesBetweenParts) {
  const std::string& wire = Fixture100();
  const size_t begin = wire.find('[') + 1;
  const size_t end = wire.rfind("],\"placement_id\"");
  const size_t parts = Count(wire.substr(begin, end - begin), "}},{") + 1;
  ASSERT_GE(parts, 3u);
  for (size_t pieces : {size_t{1}, size_t{2}, size_t{3}, size_t{1000}}) {
    SCOPED_TRACE(pieces);
    const std::vector<size_t> cuts =
        FindPartBoundaries(wire, begin, end, pieces);
    // At most pieces - 1 cuts, never more than the boundaries there are.
    EXPECT_EQ(cuts.size(), std::min(pieces - 1, parts - 1));
    for (size_t i = 0; i < cuts.size(); ++i) {
      const size_t at = cuts[i];
      EXPECT_EQ(wire[at], ',');
      EXPECT_EQ(wire.compare(at - 2, 3, "}},"), 0);
      EXPECT_EQ(wire.compare(at + 1, 14, "{\"fragments\":["), 0);
      if (i > 0) {
        EXPECT_LT(cuts[i - 1], at);
      }
    }
  }
  // None past the last part.
  EXPECT_TRUE(FindPartBoundaries(wire, end - 10, end, 2).empty());
}

// The general decoder's result for `wire` (a leading space is not
// canonical, so the canonical reader declines it).
Result<WeightPlacementManifest> General(const std::string& wire) {
  return WeightPlacementFromJson(" " + wire);
}

void ExpectSame(const Result<WeightPlacementManifest>& fast,
                const Result<WeightPlacementManifest>& general) {
  ASSERT_EQ(fast.ok(), general.ok())
      << (fast.ok() ? general.status() : fast.status()).ToString();
  if (!fast.ok()) {
    EXPECT_EQ(fast.status().message(), general.status().message());
    return;
  }
  EXPECT_EQ(fast->placement_id(), general->placement_id());
  EXPECT_EQ(fast->digest(), general->digest());
  EXPECT_EQ(WeightPlacementToJson(*fast), WeightPlacementToJson(*general));
}

TEST(CanonicalPartsTest, BothPathsAgreeOnEveryFixtureAndScenario) {
  int files = 0;
  for (const char* dir :
       {"fixtures/placements", "fixtures/plans", "scenarios"}) {
    for (const auto& e : std::filesystem::directory_iterator(
             std::string(RESHARD_TEST_DATA) + "/" + dir)) {
      const std::string name = e.path().filename().string();
      if (e.path().extension() != ".json" || name == "expected.json") continue;
      const std::string text = ReadTestData(std::string(dir) + "/" + name);
      if (text.rfind("{\"parts\":[", 0) != 0) continue;  // not a placement
      SCOPED_TRACE(name);
      ++files;
      // Every file is canonical, so its golden identities check the
      // canonical reader.
      EXPECT_TRUE(ReadCanonicalPlacement(text).has_value());
      EXPECT_FALSE(ReadCanonicalPlacement(" " + text).has_value());
      ExpectSame(WeightPlacementFromJson(text), General(text));
    }
  }
  EXPECT_GT(files, 20);
}

// Both decoders give the fragments of one tensor one id string between
// them (a million fragments of a thousand tensors hold a thousand ids).
TEST(CanonicalPartsTest, FragmentsOfATensorShareItsId) {
  for (bool canonical : {true, false}) {
    SCOPED_TRACE(canonical);
    ASSERT_OK_AND_ASSIGN(auto m, canonical
                                     ? WeightPlacementFromJson(Fixture100())
                                     : General(Fixture100()));
    std::map<std::string, const std::string*> seen;
    size_t shared = 0;
    for (const auto& part : m.parts()) {
      for (const auto& f : part.fragments()) {
        auto [it, fresh] = seen.emplace(f.tensor_id(), &f.tensor_id());
        if (!fresh) {
          EXPECT_EQ(it->second, &f.tensor_id()) << f.tensor_id();
          ++shared;
        }
      }
    }
    EXPECT_EQ(seen.size(), m.tensors().size());
    EXPECT_GT(shared, 0u);
  }
}

// `variant` of canonical `text` is declined by the canonical reader and
// decodes to the placement of `text`.
void ExpectCanonicalIdentities(const std::string& variant,
                               const std::string& text) {
  ASSERT_NE(variant, text);
  EXPECT_FALSE(ReadCanonicalPlacement(variant).has_value());
  ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(text));
  ASSERT_OK_AND_ASSIGN(auto d, WeightPlacementFromJson(variant));
  EXPECT_EQ(d.placement_id(), m.placement_id());
  EXPECT_EQ(d.digest(), m.digest());
  EXPECT_EQ(WeightPlacementToJson(d), text);
}

// Input the canonical reader must decline: decoded by the general decoder
// to the canonical content, whose identities are those of the canonical
// wire (not a hash of these bytes).
TEST(CanonicalPartsTest, NonCanonicalInputHasTheCanonicalIdentities) {
  ASSERT_OK_AND_ASSIGN(auto m, WeightPlacementFromJson(Fixture100()));
  const auto& frags = m.parts().front().fragments();
  const std::string f0 = frags[0].placement_fragment_id();
  const std::string tensor = frags[0].tensor_id();
  // The first part's first two fragments in the other order.
  const std::string& text = Fixture100();
  const size_t a = text.find("{\"aliases\"");
  const size_t b = text.find(",{\"aliases\"", a) + 1;
  const size_t c = text.find(",{\"aliases\"", b);
  const size_t part_end = text.find("],\"participant_id\"", a);
  const size_t b_end = (c == std::string::npos || c > part_end) ? part_end : c;
  std::string reordered = text.substr(0, a) + text.substr(b, b_end - b) + "," +
                          text.substr(a, b - 1 - a) + text.substr(b_end);
  const std::string variants[] = {
      reordered,
      Replace(text, ",\"placement_fragment_id\":\"" + f0,
              ",\"pipeline_stage_id\":null,\"placement_fragment_id\":\"" + f0),
      Replace(text, "\"tensor_id\":\"" + tensor,
              "\"tensor_id\":\"\\u00" +
                  std::string(1, "0123456789abcdef"[tensor[0] >> 4]) +
                  std::string(1, "0123456789abcdef"[tensor[0] & 15]) +
                  tensor.substr(1)),
      Replace(text, "\"nbytes\":", "\"nbytes\" :"),
  };
  for (const std::string& v : variants) ExpectCanonicalIdentities(v, text);
}

TEST(CanonicalPartsTest, UnsortedAliasesAndPartsHaveTheCanonicalIdentities) {
  const std::string text =
      ReadTestData("fixtures/placements/placement_101.json");
  std::string aliases = Replace(
      text, "\"aliases\":[\"lm_head.weight\",\"model.embed_tokens.weight\"]",
      "\"aliases\":[\"model.embed_tokens.weight\",\"lm_head.weight\"]");
  // The first two parts swapped.
  const size_t p0 = text.find("{\"fragments\"");
  const size_t p1 = text.find("}},{\"fragments\"", p0) + 3;
  const size_t p2 = text.find("}},{\"fragments\"", p1) + 3;
  std::string parts = text.substr(0, p0) + text.substr(p1, p2 - 1 - p1) + "," +
                      text.substr(p0, p1 - 1 - p0) + text.substr(p2 - 1);
  for (const std::string& v : {aliases, parts}) {
    ExpectCanonicalIdentities(v, text);
  }
}

// A placement large enough to be read on two threads: the paths agree on
// the placement and on errors in either half, and a part out of order in
// the second half is left to the general decoder.
TEST(CanonicalPartsTest, LargePlacementsAgreeAcrossTheThreadSplit) {
  ASSERT_OK_AND_ASSIGN(auto built, testing::LargeExpertDraft().Build());
  const std::string text = WeightPlacementToJson(built);
  ASSERT_GT(text.size(), size_t{4} << 20);
  ASSERT_TRUE(ReadCanonicalPlacement(text).has_value());
  ExpectSame(WeightPlacementFromJson(text), General(text));
  ASSERT_OK_AND_ASSIGN(auto fast, WeightPlacementFromJson(text));
  EXPECT_EQ(fast.digest(), built.digest());
  // A broken fragment near the end, then one near the start.
  std::string bad = text;
  bad.replace(bad.rfind("\"nbytes\":128"), 12, "\"nbytes\":127");
  EXPECT_FALSE(ReadCanonicalPlacement(bad).has_value());
  ExpectSame(WeightPlacementFromJson(bad), General(bad));
  bad.replace(bad.find("\"nbytes\":128"), 12, "\"nbytes\":129");
  ExpectSame(WeightPlacementFromJson(bad), General(bad));
  // The last two parts swapped.
  const size_t last = text.rfind("}},{\"fragments\"") + 3;
  const size_t before = text.rfind("}},{\"fragments\"", last - 4) + 3;
  const size_t end = text.rfind("],\"placement_id\"");
  std::string swapped = text.substr(0, before) + text.substr(last, end - last) +
                        "," + text.substr(before, last - 1 - before) +
                        text.substr(end);
  ASSERT_EQ(swapped.size(), text.size());
  EXPECT_FALSE(ReadCanonicalPlacement(swapped).has_value());
  ASSERT_OK_AND_ASSIGN(auto d, WeightPlacementFromJson(swapped));
  EXPECT_EQ(d.digest(), built.digest());
}

// The owner's decoder gives the text's pages back as it reads: the same
// placement as the string decoder; a document that proves not canonical
// after pages went is read again through `reread` (once) and decoded as
// the string decoder decodes it, errors included.
TEST(CanonicalPartsTest, OwnedTextIsGivenBackAndReadAgainWhenNeeded) {
  ASSERT_OK_AND_ASSIGN(auto built, testing::LargeExpertDraft().Build());
  const std::string text = WeightPlacementToJson(built);
  ASSERT_GT(text.size(), size_t{4} << 20);  // large enough to give back
  {
    // Pages of a copy are given back: they read as zeros afterwards.
    std::string copy = text;
    bool released = false;
    auto spec = ReadCanonicalPlacement(copy, &released);
    ASSERT_TRUE(spec.has_value());
    EXPECT_TRUE(released);
    EXPECT_TRUE(spec->prefix.empty());
    ASSERT_TRUE(spec->prefix_hash.has_value());
    EXPECT_NE(copy, text);
    EXPECT_NE(copy.find(std::string(4096, '\0')), std::string::npos);
  }
  int rereads = 0;
  auto reread_with = [&](std::string what) {
    return [&rereads, what]() -> Result<std::string> {
      ++rereads;
      return what;
    };
  };
  ASSERT_OK_AND_ASSIGN(
      auto owned, PlacementDecoder::FromOwnedJson(text, reread_with(text)));
  EXPECT_EQ(rereads, 0);
  EXPECT_EQ(owned.placement_id(), built.placement_id());
  EXPECT_EQ(owned.digest(), built.digest());
  EXPECT_EQ(WeightPlacementToJson(owned), text);
  // Without a way to read it again nothing is given back, and the same
  // placement comes out.
  ASSERT_OK_AND_ASSIGN(auto kept, PlacementDecoder::FromOwnedJson(text, {}));
  EXPECT_EQ(kept.digest(), built.digest());
  // Not canonical in its last part (pages went before that was seen): read
  // again, and the general decoder's placement or error.
  const size_t end = text.rfind("],\"placement_id\"");
  std::string spaced = text;
  spaced.insert(end, " ");
  ASSERT_OK_AND_ASSIGN(auto general, PlacementDecoder::FromOwnedJson(
                                         spaced, reread_with(spaced)));
  EXPECT_EQ(rereads, 1);
  EXPECT_EQ(general.digest(), built.digest());
  std::string bad = text;
  bad.replace(bad.rfind("\"nbytes\":128"), 12, "\"nbytes\":127");
  auto refused = PlacementDecoder::FromOwnedJson(bad, reread_with(bad));
  EXPECT_EQ(rereads, 2);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            WeightPlacementFromJson(bad).status().message());
  // A file that cannot be read again: its error.
  auto gone = PlacementDecoder::FromOwnedJson(bad, []() -> Result<std::string> {
    return Status::NotFound("cannot read p.json: gone");
  });
  ASSERT_FALSE(gone.ok());
  EXPECT_EQ(gone.status().message(), "cannot read p.json: gone");
}

}  // namespace
}  // namespace reshard::internal
