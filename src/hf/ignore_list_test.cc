// ModuleIgnoreList: names, expressions matched from the start of the name
// (re.match), and the refusals (bad, exponential, too many, too long).

#include "hf/ignore_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using ::reshard::testing::StatusIs;
using ::testing::HasSubstr;

TEST(ModuleIgnoreListTest, NamesAndExpressionsAnchoredAtTheStart) {
  ASSERT_OK_AND_ASSIGN(
      auto list, ModuleIgnoreList::Make({"lm_head", "re:.*mlp\\.gate$",
                                         "re:model\\.layers\\.1\\.self_attn",
                                         "re:.*(q|k|v)_proj$"}));
  EXPECT_EQ(list.size(), 4u);
  EXPECT_TRUE(list.Ignores("lm_head"));
  EXPECT_FALSE(list.Ignores("lm_head2"));  // names are whole names
  EXPECT_TRUE(list.Ignores("model.layers.3.mlp.gate"));
  EXPECT_FALSE(list.Ignores("model.layers.3.mlp.gate_proj"));  // "$"
  // Anchored at the start only, as re.match: a prefix matches.
  EXPECT_TRUE(list.Ignores("model.layers.1.self_attn.o_proj"));
  EXPECT_FALSE(list.Ignores("xmodel.layers.1.self_attn.o_proj"));
  EXPECT_TRUE(list.Ignores("model.layers.7.self_attn.k_proj"));
  EXPECT_FALSE(list.Ignores("model.layers.7.self_attn.o_proj"));
}

// Matching time is linear in the name whatever the expression: shapes a
// backtracking matcher takes exponential time on are matched, quickly and
// with re.match's answers.
TEST(ModuleIgnoreListTest, NestedRepetitionsMatchInLinearTime) {
  const std::string as(40, 'a');
  for (const char* pattern : {"re:(a+)+$", "re:(a|aa)*b", "re:((ab)*c)+",
                              "re:(?:x*){2,}y", "re:(.*)*z"}) {
    ASSERT_OK_AND_ASSIGN(auto list, ModuleIgnoreList::Make({pattern}));
    const auto t0 = std::chrono::steady_clock::now();
    const bool ignored = list.Ignores(as + "!");
    EXPECT_LT(std::chrono::steady_clock::now() - t0,
              std::chrono::milliseconds(100))
        << pattern;
    EXPECT_FALSE(ignored) << pattern;
  }
  ASSERT_OK_AND_ASSIGN(auto plus, ModuleIgnoreList::Make({"re:(a+)+$"}));
  EXPECT_TRUE(plus.Ignores(as));
  ASSERT_OK_AND_ASSIGN(auto alt, ModuleIgnoreList::Make({"re:(a|aa)*b"}));
  EXPECT_TRUE(alt.Ignores(as + "b"));
}

// The probe's bypass of the former guard: "[^]" and "[]" read as bracket
// expressions that swallow the rest, so "(.+)+" went unchecked and hung.
// Like Python's re, a "]" right after "[" or "[^" is a member, so these
// are unterminated classes: refused at once, naming the entry.
TEST(ModuleIgnoreListTest,
     ReDoSGuardBypassWithEmptyBracketClassIsRefusedAtOnce) {
  for (const std::string entry : {"re:[^](.+)+Z", "re:[](.+)+Z"}) {
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THAT(
        ModuleIgnoreList::Make({entry}),
        StatusIs(StatusCode::kInvalidArgument,
                 "config.json: quantization_config.ignore entry " + entry +
                     " is not a regular expression (missing ]: " +
                     entry.substr(3) + ")"));
    EXPECT_LT(std::chrono::steady_clock::now() - t0,
              std::chrono::milliseconds(100));
  }
  // A bracket class whose "]" is a member, then a nested repetition:
  // compiled, and matched in linear time.
  ASSERT_OK_AND_ASSIGN(auto list, ModuleIgnoreList::Make({"re:[]a](.+)+Z"}));
  const std::string name = "]" + std::string(5000, 'x');
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(list.Ignores(name));
  EXPECT_TRUE(list.Ignores(name + "Z"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(100));
}

// The probe's second bypass: chains of ".*" (never checked by the former
// guard) against GLM-4.5's module names ran for minutes.
TEST(ModuleIgnoreListTest,
     ReDoSGuardBypassWithChainedDotStarsMatchesInLinearTime) {
  std::string pattern = "re:";
  for (int i = 0; i < 9; ++i) pattern += ".*";
  pattern += "Z";
  ASSERT_OK_AND_ASSIGN(auto list, ModuleIgnoreList::Make({pattern}));
  const auto t0 = std::chrono::steady_clock::now();
  for (int layer = 0; layer < 92; ++layer) {
    for (const char* m : {"self_attn.q_proj", "mlp.experts.127.down_proj",
                          "mlp.shared_experts.gate_proj"}) {
      EXPECT_FALSE(
          list.Ignores("model.layers." + std::to_string(layer) + "." + m));
    }
  }
  EXPECT_TRUE(list.Ignores("model.layers.0.mlp.Z"));
  EXPECT_LT(std::chrono::steady_clock::now() - t0,
            std::chrono::milliseconds(100));
}

// What RE2 cannot match in linear time is refused by name.
TEST(ModuleIgnoreListTest, BackreferencesAndLookaroundAreRefusedByName) {
  const std::string field = "config.json: quantization_config.ignore entry ";
  EXPECT_THAT(ModuleIgnoreList::Make({"re:(a)\\1"}),
              StatusIs(StatusCode::kInvalidArgument,
                       field + "re:(a)\\1 uses a backreference (\\1), which "
                               "cannot be matched in linear time"));
  EXPECT_THAT(ModuleIgnoreList::Make({"re:(?P<x>a)(?P=x)"}),
              StatusIs(StatusCode::kInvalidArgument,
                       field + "re:(?P<x>a)(?P=x) uses a backreference "
                               "((?P=), which cannot be matched in linear "
                               "time"));
  for (const char* look : {"(?=", "(?!", "(?<=", "(?<!"}) {
    const std::string entry = std::string("re:.*") + look + "mlp)gate";
    EXPECT_THAT(ModuleIgnoreList::Make({entry}),
                StatusIs(StatusCode::kInvalidArgument,
                         field + entry + " uses lookaround (" + look +
                             "), which cannot be matched in linear time"));
  }
  // Escaped and bracketed quantifier characters, non-capturing groups and
  // counted repetitions compile.
  for (const char* good : {"re:(ab)+c", "re:x\\(a+\\)+", "re:([a+])+",
                           "re:(?:mlp)\\.gate", "re:a{2}(b)?"}) {
    EXPECT_OK(ModuleIgnoreList::Make({good})) << good;
  }
}

TEST(ModuleIgnoreListTest, RefusalsNameTheEntry) {
  EXPECT_THAT(ModuleIgnoreList::Make({"re:model[.layers"}),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: quantization_config.ignore entry "
                       "re:model[.layers is not a regular expression "
                       "(missing ]: [.layers)"));
  EXPECT_THAT(ModuleIgnoreList::Make({std::string(300, 'a')}),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("is longer than 256 bytes")));
  EXPECT_THAT(
      ModuleIgnoreList::Make(std::vector<std::string>(5000, "lm_head")),
      StatusIs(StatusCode::kInvalidArgument,
               "config.json: quantization_config.ignore has 5000 entries, "
               "more than 4096"));
}

}  // namespace
}  // namespace reshard::internal
