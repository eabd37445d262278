#include "util/printable.h"

#include <gtest/gtest.h>

#include <string>

#include "reshard/placement.h"
#include "reshard/status.h"

namespace reshard::internal {
namespace {

TEST(PrintableTest, KeepsPrintableTextIncludingNonAscii) {
  EXPECT_EQ(Printable("expert.0.w1"), "expert.0.w1");
  EXPECT_EQ(Printable("gewicht-\xc3\xa4-\xf0\x9f\x98\x80"),
            "gewicht-\xc3\xa4-\xf0\x9f\x98\x80");
  EXPECT_TRUE(IsPrintable("plain"));
  EXPECT_FALSE(IsPrintable("a\nb"));
}

TEST(PrintableTest, EscapesControlsAnsiAndBrokenUtf8) {
  EXPECT_EQ(Printable("a\nreshard: ok: forged"), "a\\nreshard: ok: forged");
  EXPECT_EQ(Printable("\x1b[31mred\x1b[0m"), "\\e[31mred\\e[0m");
  EXPECT_EQ(Printable(std::string("nul\0x", 5)), "nul\\x00x");
  EXPECT_EQ(Printable("\r\t\x7f"), "\\r\\t\\x7f");
  // A lone continuation byte, a truncated sequence, an overlong '/' and an
  // encoded surrogate are not UTF-8.
  EXPECT_EQ(Printable("\x80|\xe2\x82|\xc0\xaf|\xed\xa0\x80"),
            "\\x80|\\xe2\\x82|\\xc0\\xaf|\\xed\\xa0\\x80");
  // C1 CSI and a right-to-left override.
  EXPECT_EQ(Printable("\xc2\x9b"
                      "2J|\xe2\x80\xae"),
            "\\u{009b}2J|\\u{202e}");
}

TEST(PrintableTest, ShortensLongStringsStatingTheirLength) {
  const std::string big(50 << 20, 'k');
  const std::string p = Printable(big);
  EXPECT_EQ(p, std::string(kMaxQuotedBytes, 'k') + "... (52428800 bytes)");
  // Never cuts inside a character.
  std::string wide;
  for (int i = 0; i < 200; ++i) wide += "\xc3\xa4";
  EXPECT_EQ(Printable(wide, 5), "\xc3\xa4\xc3\xa4... (400 bytes)");
}

TEST(PrintableTest, SanitizeMessageKeepsHeadAndTail) {
  const std::string msg = "head: " + std::string(1 << 20, 'x') + " :tail";
  const std::string s = SanitizeMessage(msg);
  EXPECT_LT(s.size(), kMaxMessageBytes + 100);
  EXPECT_TRUE(s.starts_with("head: xxx"));
  EXPECT_TRUE(s.ends_with("xxx :tail"));
  EXPECT_NE(s.find(" bytes omitted] ... "), std::string::npos);
}

TEST(StatusHygieneTest, EveryStatusMessageIsOneBoundedLine) {
  const Status st =
      Status::InvalidArgument("bad id \"x\n\x1b[32mreshard: ok: fine\"");
  EXPECT_EQ(st.message(), "bad id \"x\\n\\e[32mreshard: ok: fine\"");
  EXPECT_EQ(st.WithContext("file\n.json").message(),
            "file\\n.json: bad id \"x\\n\\e[32mreshard: ok: fine\"");
  const Status big = Status::NotFound(std::string(10 << 20, 'z'));
  EXPECT_LE(big.message().size(), kMaxMessageBytes + 64);
}

// Regression: a decoded field name with a newline and an ANSI escape used
// to print a forged second line; a 50 MB unknown key was echoed whole.
TEST(StatusHygieneTest, DecoderErrorsEscapeAndShortenUnknownKeys) {
  auto forged =
      WeightPlacementFromJson("{\"x\\n\\u001b[32mreshard: ok: valid\":1}");
  ASSERT_FALSE(forged.ok());
  const std::string& m = forged.status().message();
  EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  EXPECT_EQ(m.find('\x1b'), std::string::npos) << m;
  EXPECT_NE(m.find("unknown field \"x\\n\\e[32mreshard: ok: valid\""),
            std::string::npos)
      << m;

  const std::string key(50 << 20, 'k');
  auto huge = WeightPlacementFromJson("{\"" + key + "\":1}");
  ASSERT_FALSE(huge.ok());
  const std::string& h = huge.status().message();
  EXPECT_LT(h.size(), 1024u) << h.substr(0, 200);
  EXPECT_NE(h.find("... (52428800 bytes)"), std::string::npos);
}

}  // namespace
}  // namespace reshard::internal
