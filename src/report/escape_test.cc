// Escaping and number formatting of the plan report (report/escape.h).

#include "report/escape.h"

#include <gtest/gtest.h>

namespace reshard::internal {
namespace {

TEST(ReportEscapeTest, HtmlEscapesMarkupAndQuotes) {
  EXPECT_EQ(Html("<a href=\"x\">&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;");
  EXPECT_EQ(Html("</script><script>alert(1)</script>"),
            "&lt;/script&gt;&lt;script&gt;alert(1)&lt;/script&gt;");
  EXPECT_EQ(Html("plain.layers.0.weight"), "plain.layers.0.weight");
}

TEST(ReportEscapeTest, HtmlShowsControlCharactersAndBidiAsEscapes) {
  EXPECT_EQ(Html(std::string("a\x01"
                             "b\x7f\n",
                             5)),
            "a\\x01b\\x7f\\n");
  EXPECT_EQ(Html("rtl\xe2\x80\xae<x>"), "rtl\\u{202e}&lt;x&gt;");
  EXPECT_EQ(Html(std::string("nul\0", 4)), "nul\\x00");
  // Not UTF-8: shown as bytes, never passed to the page.
  EXPECT_EQ(Html("\xff<"), "\\xff&lt;");
  // Other non-ASCII text is kept.
  EXPECT_EQ(Html("\xc3\xa4"), "\xc3\xa4");
}

TEST(ReportEscapeTest, ScriptSafeJsonCannotEndTheScriptElement) {
  EXPECT_EQ(ScriptSafeJson("{\"id\":\"</script><!--&x\"}"),
            "{\"id\":\"\\u003c/script\\u003e\\u003c!--\\u0026x\"}");
  EXPECT_EQ(ScriptSafeJson("[1,2,{\"a\":null}]"), "[1,2,{\"a\":null}]");
}

TEST(ReportEscapeTest, Numbers) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.00 KiB");
  EXPECT_EQ(HumanBytes(1385174272), "1.29 GiB");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "16384.00 PiB");
  EXPECT_EQ(GroupedDigits(0), "0");
  EXPECT_EQ(GroupedDigits(999), "999");
  EXPECT_EQ(GroupedDigits(1000), "1,000");
  EXPECT_EQ(GroupedDigits(1385174272), "1,385,174,272");
  EXPECT_EQ(ShortDouble(12.5), "12.5");
  EXPECT_EQ(ShortDouble(0.1), "0.1");
  EXPECT_EQ(ShortDouble(1.0 / 0.0), "0");
  EXPECT_EQ(HumanSeconds(2.414), "2.41 s");
  EXPECT_EQ(HumanSeconds(0.0382), "38.2 ms");
  EXPECT_EQ(HumanSeconds(0.000512), "512.0 us");
  EXPECT_EQ(HumanSeconds(4e-9), "4.0 ns");
}

}  // namespace
}  // namespace reshard::internal
