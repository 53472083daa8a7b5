// One printable line from any bytes (util/one_line.h).
#include "kiwi/util/one_line.h"

#include <gtest/gtest.h>

namespace kiwi {
namespace {

TEST(OneLine, EscapesControlCharactersAndInvalidBytes) {
  EXPECT_EQ(OneLine("a\nb\rc\td"), "a\\x0ab\\x0dc\\x09d");
  EXPECT_EQ(OneLine("\x1b[31mred\x7f"), "\\x1b[31mred\\x7f");  // no terminal escape sequence gets through
  EXPECT_EQ(OneLine("bad\xff byte"), "bad\\xff byte");
  EXPECT_EQ(OneLine("\xc3"), "\\xc3");                    // a truncated sequence
  EXPECT_EQ(OneLine("\xc0\xaf"), "\\xc0\\xaf");           // an overlong '/'
  EXPECT_EQ(OneLine("\xed\xa0\x80"), "\\xed\\xa0\\x80");  // a UTF-16 surrogate
}

TEST(OneLine, KeepsPrintableTextAndValidUtf8) {
  EXPECT_EQ(OneLine("kiwi: plain text [1, 2] {}"), "kiwi: plain text [1, 2] {}");
  EXPECT_EQ(OneLine("mod\xc3\xa8le.json \xe2\x82\xac \xf0\x9f\xa5\x9d"), "mod\xc3\xa8le.json \xe2\x82\xac \xf0\x9f\xa5\x9d");
  EXPECT_EQ(OneLine(""), "");
}

TEST(MessageLine, LineBreaksBecomeSpaces) {
  EXPECT_EQ(MessageLine("first\nsecond\r\nthird \x1b"), "first second  third \\x1b");
}

}  // namespace
}  // namespace kiwi
