#include "kiwi/util/json_depth.h"

#include <gtest/gtest.h>

#include <string>

namespace kiwi {
namespace {

std::string Nested(int levels, char open = '[', char close = ']') {
  return std::string(static_cast<size_t>(levels), open) + std::string(static_cast<size_t>(levels), close);
}

TEST(JsonDepth, CountsArraysAndObjectsInsideOneAnother) {
  EXPECT_FALSE(JsonDeeperThan("{}", 1));
  EXPECT_TRUE(JsonDeeperThan("{\"a\": []}", 1));
  EXPECT_FALSE(JsonDeeperThan("[[], [], {}]", 2));  // siblings do not add up
  EXPECT_FALSE(JsonDeeperThan(Nested(512)));
  EXPECT_TRUE(JsonDeeperThan(Nested(513)));
  EXPECT_TRUE(JsonDeeperThan(Nested(100000)));
}

TEST(JsonDepth, BracketsInStringsDoNotCount) {
  EXPECT_FALSE(JsonDeeperThan("[\"[[[[\", \"\\\"[[[\"]", 1));
  EXPECT_FALSE(JsonDeeperThan("{\"k\\\\\": \"{{{\"}", 1));  // an escaped backslash ends before the quote
  EXPECT_FALSE(JsonDeeperThan("\"" + Nested(1000) + "\"", 0));
}

}  // namespace
}  // namespace kiwi
