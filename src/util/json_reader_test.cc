// Tests of the strict JSON reader: field sets, duplicate keys, integer and
// string rules, paths in messages, and CanonicalizeJsonText's rejections.

#include "util/json_reader.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "reshard/json.h"
#include "testing/status_testing.h"

namespace reshard::internal {
namespace {

using namespace std::string_view_literals;

JsonDocument MustParse(std::string_view text) {
  auto doc = JsonDocument::Parse(text);
  EXPECT_OK(doc) << " for " << text;
  return std::move(doc).ValueOrDie();
}

std::string ParseError(std::string_view text) {
  auto doc = JsonDocument::Parse(text);
  EXPECT_FALSE(doc.ok()) << "accepted: " << text;
  if (doc.ok()) return "";
  EXPECT_EQ(doc.status().code(), StatusCode::kInvalidArgument);
  return doc.status().message();
}

std::string CanonError(std::string_view text) {
  auto r = CanonicalizeJsonText(text, JsonAscii::kEscapeNonAscii);
  EXPECT_FALSE(r.ok()) << "accepted: " << text << " -> " << (r.ok() ? *r : "");
  if (r.ok()) return "";
  return r.status().message();
}

// ---------------------------------------------------------------------------
// JsonPath
// ---------------------------------------------------------------------------

TEST(JsonReaderTest, PathRendering) {
  JsonPath root;
  EXPECT_EQ(root.ToString(), "$");
  JsonPath parts = root.Field("parts");
  EXPECT_EQ(parts.ToString(), "parts");
  JsonPath part3 = parts.Index(3);
  EXPECT_EQ(part3.ToString(), "parts[3]");
  JsonPath frags = part3.Field("fragments");
  JsonPath frag1 = frags.Index(1);
  JsonPath nbytes = frag1.Field("nbytes");
  EXPECT_EQ(nbytes.ToString(), "parts[3].fragments[1].nbytes");
  EXPECT_EQ(root.Index(0).ToString(), "[0]");
  JsonPath i0 = root.Index(0);
  EXPECT_EQ(i0.Index(12).ToString(), "[0][12]");
  JsonPath a = root.Field("a");
  JsonPath ab = a.Field("b");
  EXPECT_EQ(ab.Field("c").ToString(), "a.b.c");
  JsonPath t = root.Field("topology");
  JsonPath p = t.Field("participants");
  EXPECT_EQ(p.Index(0).Field("rank").ToString(),
            "topology.participants[0].rank");
}

// ---------------------------------------------------------------------------
// JsonDocument::Parse
// ---------------------------------------------------------------------------

TEST(JsonReaderTest, ParsesValidDocumentsAndOutlivesMove) {
  std::vector<JsonDocument> docs;
  docs.push_back(MustParse(R"({"a":[1,2,3],"b":"x"})"));
  docs.push_back(MustParse("  [ ]  "));
  docs.push_back(MustParse("\"s\""));
  docs.push_back(MustParse("null"));
  JsonDocument moved = std::move(docs[0]);
  ASSERT_OK_AND_ASSIGN(auto obj, StrictObject::Make(moved.root(), JsonPath(),
                                                    "thing", {"a", "b"}));
  ASSERT_OK_AND_ASSIGN(auto arr, ReadIntArray(obj.Get("a"), JsonPath()));
  EXPECT_EQ(arr, (std::vector<int64_t>{1, 2, 3}));
}

// The pooled parser's padded copy is reused: a document shorter than the
// one before it must be read alone, never with the rest of the old text.
TEST(JsonReaderTest, ReusedPaddedCopyHoldsOnlyTheCurrentDocument) {
  std::string long_text = "[1";
  for (int i = 2; i <= 5000; ++i) long_text += "," + std::to_string(i);
  long_text += "]";
  for (std::string_view text :
       {std::string_view(long_text), "[7]"sv, std::string_view(long_text)}) {
    JsonDocument doc = MustParse(text);
    ASSERT_OK_AND_ASSIGN(Dims values, ReadIntArray(doc.root(), JsonPath()));
    if (text.size() == 3) {
      EXPECT_EQ(values, Dims({7}));
    } else {
      ASSERT_EQ(values.size(), 5000u);
      for (int64_t i = 0; i < 5000; ++i) ASSERT_EQ(values[i], i + 1);
    }
  }
  // A prefix of the long document is incomplete on its own.
  EXPECT_EQ(JsonDocument::Parse(std::string_view(long_text).substr(0, 6))
                .status()
                .message(),
            "invalid JSON: The JSON document has an improper structure: "
            "missing or superfluous commas, braces, missing keys, etc.");
}

TEST(JsonReaderTest, RejectsNonFiniteNumbers) {
  for (std::string_view text :
       {"NaN", "[NaN]", "Infinity", "[-Infinity]", R"({"nbytes":Infinity})",
        R"({"a":"x","b":NaN})"}) {
    EXPECT_EQ(ParseError(text), "non-finite JSON number is unsupported")
        << text;
    EXPECT_EQ(CanonError(text), "non-finite JSON number is unsupported")
        << text;
  }
  // The same tokens inside strings are ordinary text.
  ASSERT_OK_AND_ASSIGN(
      auto r, CanonicalizeJsonText(R"({"x":"NaN","y":"-Infinity \" NaN"})",
                                   JsonAscii::kEscapeNonAscii));
  EXPECT_EQ(r, R"({"x":"NaN","y":"-Infinity \" NaN"})");
}

TEST(JsonReaderTest, RejectsIntegersBeyondU64) {
  for (std::string_view text :
       {"18446744073709551616", "[99999999999999999999]",
        R"({"nbytes":123456789012345678901234567890})",
        R"({"s":"12345678901234567890123","n":18446744073709551616})"}) {
    EXPECT_EQ(ParseError(text),
              "JSON integer must fit in an unsigned 64-bit integer")
        << text;
  }
  // u64 max itself is fine, and long digit runs inside strings are ignored.
  MustParse("18446744073709551615");
  auto bad = ParseError(R"({"s":"123456789012345678901234567890",})");
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "invalid JSON", bad);
}

TEST(JsonReaderTest, RejectsInvalidUtf8) {
  for (std::string_view text :
       {"\"\xff\""sv, "\"\xc0\xaf\""sv, "\"\x80\""sv, "\"\xc3\""sv,
        "\"\xe2\x82\""sv, "\"\xed\xa0\x80\""sv, "\"\xf4\x90\x80\x80\""sv,
        "{\"\xfe\":1}"sv}) {
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "invalid JSON",
                        ParseError(text))
        << text;
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "invalid JSON",
                        CanonError(text))
        << text;
  }
}

TEST(JsonReaderTest, RejectsMalformedAndTrailingContent) {
  for (std::string_view text :
       {"", "   ", "[1] x", "[1,]", "{\"a\":1,}", "{\"a\"}", "[01]", "-",
        "{\"a\":1", "[\"unterminated]", "tru", "{} {}", "'a'"}) {
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "invalid JSON",
                        ParseError(text))
        << text;
  }
}

// ---------------------------------------------------------------------------
// StrictObject
// ---------------------------------------------------------------------------

TEST(JsonReaderTest, StrictObjectExactFieldSet) {
  JsonDocument doc = MustParse(R"({"b":2,"a":1})");
  ASSERT_OK_AND_ASSIGN(
      auto obj,
      StrictObject::Make(doc.root(), JsonPath(), "thing", {"a", "b"}, {"c"}));
  EXPECT_EQ(int64_t(obj.Get("a")), 1);
  EXPECT_EQ(int64_t(obj.Get("b")), 2);
  EXPECT_FALSE(obj.Find("c").has_value());
  EXPECT_FALSE(obj.Find("zzz").has_value());

  JsonDocument with_opt = MustParse(R"({"c":null,"b":2,"a":1})");
  ASSERT_OK_AND_ASSIGN(auto obj2,
                       StrictObject::Make(with_opt.root(), JsonPath(), "thing",
                                          {"a", "b"}, {"c"}));
  ASSERT_TRUE(obj2.Find("c").has_value());
  EXPECT_TRUE(obj2.Find("c")->is_null());
}

TEST(JsonReaderTest, StrictObjectMissingField) {
  JsonDocument doc = MustParse(R"({"a":1})");
  JsonPath root;
  JsonPath parts = root.Field("parts");
  JsonPath part = parts.Index(3);
  JsonPath frags = part.Field("fragments");
  JsonPath frag = frags.Index(1);
  auto obj = StrictObject::Make(doc.root(), frag, "placement fragment",
                                {"a", "nbytes"});
  ASSERT_FALSE(obj.ok());
  EXPECT_EQ(obj.status().message(),
            "parts[3].fragments[1]: placement fragment schema fields do not "
            "match contract: missing field \"nbytes\"");
}

TEST(JsonReaderTest, StrictObjectUnknownField) {
  JsonDocument doc = MustParse(R"({"a":1,"b":2,"extra":3})");
  JsonPath root;
  JsonPath topo = root.Field("topology");
  auto obj = StrictObject::Make(doc.root(), topo, "topology", {"a", "b"});
  ASSERT_FALSE(obj.ok());
  EXPECT_EQ(obj.status().message(),
            "topology: topology schema fields do not match contract: "
            "unknown field \"extra\"");
  // Root path renders as "$".
  auto at_root =
      StrictObject::Make(doc.root(), root, "placement", {"a"}, {"b"});
  ASSERT_FALSE(at_root.ok());
  EXPECT_EQ(at_root.status().message(),
            "$: placement schema fields do not match contract: unknown field "
            "\"extra\"");
}

TEST(JsonReaderTest, StrictObjectDuplicateKeys) {
  for (std::string_view text : {R"({"a":1,"a":1})", R"({"a":1,"b":2,"a":3})",
                                R"({"a":1,"b":2,"c":3,"c":4})"}) {
    JsonDocument doc = MustParse(text);
    auto obj =
        StrictObject::Make(doc.root(), JsonPath(), "thing", {"a", "b"}, {"c"});
    ASSERT_FALSE(obj.ok()) << text;
    EXPECT_PRED_FORMAT2(::testing::IsSubstring, "duplicate JSON field",
                        obj.status().message())
        << text;
    EXPECT_EQ(obj.status().message().rfind("$: duplicate JSON field \"", 0), 0u)
        << obj.status().message();
  }
}

TEST(JsonReaderTest, StrictObjectNotAnObject) {
  for (std::string_view text : {"[]", "1", "\"a\"", "null", "true"}) {
    JsonDocument doc = MustParse(text);
    JsonPath root;
    JsonPath topo = root.Field("topology");
    auto obj = StrictObject::Make(doc.root(), topo, "topology", {"a"});
    ASSERT_FALSE(obj.ok()) << text;
    EXPECT_EQ(obj.status().message(), "topology must be a JSON object");
  }
}

TEST(JsonReaderTest, StrictObjectEmptyFieldSet) {
  JsonDocument doc = MustParse("{}");
  ASSERT_OK_AND_ASSIGN(auto obj,
                       StrictObject::Make(doc.root(), JsonPath(), "empty", {}));
  EXPECT_FALSE(obj.Find("a").has_value());
}

// ---------------------------------------------------------------------------
// Scalar readers
// ---------------------------------------------------------------------------

TEST(JsonReaderTest, ReadIntAcceptsInt64Range) {
  JsonDocument doc =
      MustParse("[0,-1,9223372036854775807,-9223372036854775808,-0]");
  ASSERT_OK_AND_ASSIGN(auto arr, ReadIntArray(doc.root(), JsonPath()));
  EXPECT_EQ(arr,
            (std::vector<int64_t>{0, -1, std::numeric_limits<int64_t>::max(),
                                  std::numeric_limits<int64_t>::min(), 0}));
}

TEST(JsonReaderTest, ReadIntRejectsBoolFloatStringNull) {
  JsonDocument doc =
      MustParse(R"({"n":[true,false,1.0,1e2,-0.0,"1",null,[],{}]})");
  ASSERT_OK_AND_ASSIGN(auto obj,
                       StrictObject::Make(doc.root(), JsonPath(), "t", {"n"}));
  JsonPath root;
  JsonPath n = root.Field("n");
  size_t i = 0;
  for (auto item : simdjson::dom::array(obj.Get("n"))) {
    JsonPath at = n.Index(i);
    auto r = ReadInt(item, at);
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_EQ(r.status().message(),
              "n[" + std::to_string(i) + "] must be an integer");
    ++i;
  }
  EXPECT_EQ(i, 9u);
}

TEST(JsonReaderTest, ReadIntRejectsAboveInt64) {
  JsonDocument doc = MustParse("9223372036854775808");
  JsonPath root;
  JsonPath f = root.Field("layer_id");
  auto r = ReadInt(doc.root(), f);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "layer_id must fit in a signed 64-bit integer");
}

TEST(JsonReaderTest, ReadU64Range) {
  JsonDocument doc = MustParse(
      "[0,1,18446744073709551615,9223372036854775807,"
      "9223372036854775808]");
  std::vector<uint64_t> got;
  for (auto item : simdjson::dom::array(doc.root())) {
    ASSERT_OK_AND_ASSIGN(auto r, ReadU64(item, JsonPath()));
    got.push_back(r);
  }
  EXPECT_EQ(got, (std::vector<uint64_t>{
                     0, 1, std::numeric_limits<uint64_t>::max(),
                     9223372036854775807ull, 9223372036854775808ull}));
}

TEST(JsonReaderTest, ReadU64RejectsNegativeAndNonIntegers) {
  JsonPath root;
  JsonPath parts = root.Field("parts");
  JsonPath part = parts.Index(3);
  JsonPath frags = part.Field("fragments");
  JsonPath frag = frags.Index(1);
  JsonPath nbytes = frag.Field("nbytes");
  {
    JsonDocument doc = MustParse("-1");
    auto r = ReadU64(doc.root(), nbytes);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(),
              "parts[3].fragments[1].nbytes must fit in an unsigned 64-bit "
              "integer");
  }
  {
    JsonDocument doc = MustParse("-9223372036854775808");
    auto r = ReadU64(doc.root(), nbytes);
    ASSERT_FALSE(r.ok());
    EXPECT_PRED_FORMAT2(::testing::IsSubstring,
                        "must fit in an unsigned 64-bit integer",
                        r.status().message());
  }
  for (std::string_view text :
       {"true", "false", "1.0", "\"1\"", "null", "[]"}) {
    JsonDocument doc = MustParse(text);
    auto r = ReadU64(doc.root(), nbytes);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message(),
              "parts[3].fragments[1].nbytes must be an integer")
        << text;
  }
}

TEST(JsonReaderTest, ReadNullableInt) {
  JsonDocument doc = MustParse("[null,7,-7,true,\"7\",7.5]");
  std::vector<JsonElement> items;
  for (auto item : simdjson::dom::array(doc.root())) items.push_back(item);
  ASSERT_OK_AND_ASSIGN(auto a, ReadNullableInt(items[0], JsonPath()));
  EXPECT_FALSE(a.has_value());
  ASSERT_OK_AND_ASSIGN(auto b, ReadNullableInt(items[1], JsonPath()));
  EXPECT_EQ(*b, 7);
  ASSERT_OK_AND_ASSIGN(auto c, ReadNullableInt(items[2], JsonPath()));
  EXPECT_EQ(*c, -7);
  for (size_t i = 3; i < items.size(); ++i) {
    JsonPath root;
    JsonPath f = root.Field("pipeline_stage_id");
    auto r = ReadNullableInt(items[i], f);
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_EQ(r.status().message(), "pipeline_stage_id must be an integer");
  }
}

TEST(JsonReaderTest, ReadStrings) {
  JsonDocument doc = MustParse(R"(["","x",1,null,["a"]])");
  std::vector<JsonElement> items;
  for (auto item : simdjson::dom::array(doc.root())) items.push_back(item);
  JsonPath root;
  JsonPath id = root.Field("tensor_id");

  ASSERT_OK_AND_ASSIGN(auto empty, ReadString(items[0], id));
  EXPECT_EQ(empty, "");
  ASSERT_OK_AND_ASSIGN(auto x, ReadString(items[1], id));
  EXPECT_EQ(x, "x");
  for (size_t i = 2; i < items.size(); ++i) {
    auto r = ReadString(items[i], id);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "tensor_id must be a string");
  }

  ASSERT_OK_AND_ASSIGN(auto ne, ReadNonEmptyString(items[1], id));
  EXPECT_EQ(ne, "x");
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}, size_t{4}}) {
    auto r = ReadNonEmptyString(items[i], id);
    ASSERT_FALSE(r.ok()) << i;
    EXPECT_EQ(r.status().message(), "tensor_id must be a non-empty string");
  }
}

TEST(JsonReaderTest, ReadStringKeepsEmbeddedNulAndUnicode) {
  JsonDocument doc = MustParse(R"("a\u0000b\u00e9\ud83d\ude80")");
  ASSERT_OK_AND_ASSIGN(auto r, ReadString(doc.root(), JsonPath()));
  EXPECT_EQ(r, std::string_view("a\0b\xc3\xa9\xf0\x9f\x9a\x80", 9));
}

TEST(JsonReaderTest, ArrayReaders) {
  JsonPath root;
  JsonPath shape = root.Field("global_shape");
  {
    JsonDocument doc = MustParse("[]");
    ASSERT_OK_AND_ASSIGN(auto r, ReadIntArray(doc.root(), shape));
    EXPECT_TRUE(r.empty());
    ASSERT_OK_AND_ASSIGN(auto s, ReadStringArray(doc.root(), shape));
    EXPECT_TRUE(s.empty());
  }
  {
    JsonDocument doc = MustParse("[4,true]");
    auto r = ReadIntArray(doc.root(), shape);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "global_shape[1] must be an integer");
  }
  {
    JsonDocument doc = MustParse("[4,18446744073709551615]");
    auto r = ReadIntArray(doc.root(), shape);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(),
              "global_shape[1] must fit in a signed 64-bit integer");
  }
  {
    JsonDocument doc = MustParse("[4,2.0]");
    auto r = ReadIntArray(doc.root(), shape);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "global_shape[1] must be an integer");
  }
  for (std::string_view text : {"{}", "4", "\"[]\"", "null"}) {
    JsonDocument doc = MustParse(text);
    auto r = ReadIntArray(doc.root(), shape);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().message(), "global_shape must be an array");
    auto a = ReadArray(doc.root(), shape);
    ASSERT_FALSE(a.ok());
    EXPECT_EQ(a.status().message(), "global_shape must be an array");
  }
  {
    JsonPath aliases = root.Field("aliases");
    JsonDocument doc = MustParse(R"(["a","b",3])");
    auto r = ReadStringArray(doc.root(), aliases);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().message(), "aliases[2] must be a string");
    JsonDocument ok_doc = MustParse(R"(["a","","\u00e9"])");
    ASSERT_OK_AND_ASSIGN(auto ok, ReadStringArray(ok_doc.root(), aliases));
    EXPECT_EQ(ok, (std::vector<std::string>{"a", "", "\xc3\xa9"}));
    ASSERT_OK_AND_ASSIGN(auto arr, ReadArray(ok_doc.root(), aliases));
    EXPECT_EQ(arr.size(), 3u);
  }
}

// ---------------------------------------------------------------------------
// Typed getters: the object's own path qualifies every message.
// ---------------------------------------------------------------------------

TEST(JsonReaderTest, TypedGettersReadFieldsAndNameThemByPath) {
  JsonDocument doc =
      MustParse(R"({"part":{"fragments":[{"aliases":["x"],"id":"f","n":7,)"
                R"("off":[1,2],"stage":null,"u":18446744073709551615}]}})");
  const JsonPath root;
  ASSERT_OK_AND_ASSIGN(auto top,
                       StrictObject::Make(doc.root(), root, "top", {"part"}));
  ASSERT_OK_AND_ASSIGN(auto part, top.Object("part", "part", {"fragments"}));
  ASSERT_OK_AND_ASSIGN(auto frags, part.Array("fragments"));
  EXPECT_EQ(frags.size(), 1u);
  EXPECT_EQ(frags.path().ToString(), "part.fragments");
  size_t visited = 0;
  Status st = frags.ForEach([&](JsonElement e, const JsonPath& p) -> Status {
    ++visited;
    auto f = StrictObject::Make(e, p, "fragment", {"aliases", "id", "n", "off"},
                                {"stage", "u", "absent"});
    if (!f.ok()) return f.status();
    EXPECT_EQ(*f->Id("id"), "f");
    EXPECT_EQ(*f->NonEmptyString("id"), "f");
    EXPECT_EQ(*f->I64("n"), 7);
    EXPECT_EQ(*f->U64("u"), std::numeric_limits<uint64_t>::max());
    EXPECT_EQ(*f->IntArray("off"), (std::vector<int64_t>{1, 2}));
    EXPECT_EQ(*f->StringArray("aliases"), (std::vector<std::string>{"x"}));
    EXPECT_EQ(*f->OptionalI64("stage"), std::nullopt);
    EXPECT_FALSE(f->Has("absent"));
    EXPECT_EQ(*f->OptionalI64("absent"), std::nullopt);
    EXPECT_EQ(f->I64("u").status().message(),
              "part.fragments[0].u must fit in a signed 64-bit integer");
    EXPECT_EQ(f->Bool("n").status().message(),
              "part.fragments[0].n must be a boolean");
    EXPECT_EQ(f->String("n").status().message(),
              "part.fragments[0].n must be a string");
    EXPECT_EQ(f->Array("id").status().message(),
              "part.fragments[0].id must be an array");
    EXPECT_EQ(f->Object("off", "o", {}).status().message(),
              "part.fragments[0].off must be a JSON object");
    return Status::InvalidArgument(f->FieldPath("off").ToString());
  });
  EXPECT_EQ(visited, 1u);
  EXPECT_EQ(st.message(), "part.fragments[0].off");
}

TEST(JsonReaderTest, ForEachStopsAtTheFirstError) {
  JsonDocument doc = MustParse(R"({"a":[1,"x",3]})");
  const JsonPath root;
  ASSERT_OK_AND_ASSIGN(auto top,
                       StrictObject::Make(doc.root(), root, "top", {"a"}));
  ASSERT_OK_AND_ASSIGN(auto a, top.Array("a"));
  std::vector<int64_t> seen;
  Status st = a.ForEach([&](JsonElement e, const JsonPath& p) -> Status {
    RESHARD_ASSIGN_OR_RETURN(int64_t v, ReadInt(e, p));
    seen.push_back(v);
    return Status::OK();
  });
  EXPECT_EQ(st.message(), "a[1] must be an integer");
  EXPECT_EQ(seen, (std::vector<int64_t>{1}));
}

// ---------------------------------------------------------------------------
// CanonicalizeJsonText rejections
// ---------------------------------------------------------------------------

TEST(JsonReaderTest, CanonicalizeRejectsFloats) {
  EXPECT_EQ(CanonError("1.5"),
            "$ is a floating-point number; the contract has integers only");
  EXPECT_EQ(CanonError("[1,2.0]"),
            "[1] is a floating-point number; the contract has integers only");
  EXPECT_EQ(CanonError(R"({"a":{"b":[0,1e3]}})"),
            "a.b[1] is a floating-point number; the contract has integers "
            "only");
  EXPECT_EQ(CanonError(R"({"z":0,"a":-0.0})"),
            "a is a floating-point number; the contract has integers only");
  EXPECT_EQ(CanonError("[1E2]"),
            "[0] is a floating-point number; the contract has integers only");
}

TEST(JsonReaderTest, CanonicalizeRejectsDuplicateKeys) {
  EXPECT_EQ(CanonError(R"({"a":1,"a":2})"), "$: duplicate JSON field \"a\"");
  EXPECT_EQ(CanonError(R"({"a":1,"b":2,"a":1})"),
            "$: duplicate JSON field \"a\"");
  EXPECT_EQ(CanonError(R"({"p":[{"x":1},{"y":1,"y":1}]})"),
            "p[1]: duplicate JSON field \"y\"");
  // Keys that differ only by escaping are the same key.
  EXPECT_EQ(CanonError(R"({"\u00e9":1,"é":2})"),
            "$: duplicate JSON field \"\xc3\xa9\"");
  EXPECT_EQ(CanonError(R"({"A":1,"\u0041":2})"),
            "$: duplicate JSON field \"A\"");
}

TEST(JsonReaderTest, CanonicalizeRejectsInvalidUtf8AndSurrogates) {
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "invalid JSON",
                      CanonError("[\"ok\",\"\xff\"]"));
  // A lone surrogate escape has no UTF-8 form.
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "invalid JSON",
                      CanonError(R"(["\ud800"])"));
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "invalid JSON",
                      CanonError(R"(["\udc00"])"));
}

TEST(JsonReaderTest, PublicCanonicalizeJsonPropagatesErrors) {
  auto r = CanonicalizeJson(R"({"a":1,"a":2})");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "duplicate JSON field",
                      r.status().message());
  auto f = CanonicalizeJson("[0.5]", JsonAscii::kRawUtf8);
  ASSERT_FALSE(f.ok());
  EXPECT_PRED_FORMAT2(::testing::IsSubstring, "floating-point",
                      f.status().message());
}

}  // namespace
}  // namespace reshard::internal
