// ModuleIgnoreList: names, expressions matched from the start of the name
// (re.match), and the refusals (bad, exponential, too many, too long).

#include "hf/ignore_list.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

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

TEST(ModuleIgnoreListTest, RefusesExpressionsThatCanTakeExponentialTime) {
  for (const char* bad : {"re:(a+)+$", "re:(a|aa)*b", "re:((ab)*c)+",
                          "re:(?:x*){2,}y", "re:(.*)*z"}) {
    EXPECT_THAT(ModuleIgnoreList::Make({bad}),
                StatusIs(StatusCode::kInvalidArgument,
                         HasSubstr("repeats a group that itself repeats or "
                                   "alternates")))
        << bad;
  }
  // Repeated groups without repetition inside, escaped and bracketed
  // quantifier characters are fine.
  for (const char* good : {"re:(ab)+c", "re:x\\(a+\\)+", "re:([a+])+",
                           "re:(?:mlp)\\.gate", "re:a{2}(b)?"}) {
    EXPECT_OK(ModuleIgnoreList::Make({good})) << good;
  }
}

TEST(ModuleIgnoreListTest, RefusalsNameTheEntry) {
  EXPECT_THAT(ModuleIgnoreList::Make({"re:model[.layers"}),
              StatusIs(StatusCode::kInvalidArgument,
                       "config.json: quantization_config.ignore entry "
                       "re:model[.layers is not a regular expression"));
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
