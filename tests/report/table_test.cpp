#include "kiwi/report/table.h"

#include <gtest/gtest.h>

namespace kiwi::report {
namespace {

TEST(Table, AlignsTextLeftAndNumbersRight) {
  Table t({"plan", "peak"});
  t.AddRow({"DP x8", "3.1 GiB"});
  t.AddRow({"single device", "12 GiB"});
  EXPECT_EQ(t.Render(),
            "plan              peak\n"
            "-------------  -------\n"
            "DP x8          3.1 GiB\n"
            "single device   12 GiB\n");
}

TEST(Table, PadsShortRows) {
  Table t({"a", "b", "c"});
  t.AddRow({"x"});
  EXPECT_EQ(t.rows(), 1u);
  EXPECT_EQ(t.Render(), "a  b  c\n-  -  -\nx\n");
}

}  // namespace
}  // namespace kiwi::report
