#include "kiwi/util/units.h"

#include <array>
#include <cctype>
#include <cmath>
#include <fmt/format.h>

namespace kiwi {
namespace {

struct Unit {
  std::string_view name;
  double factor;
};

constexpr std::array<Unit, 10> kUnits = {{{"", 1.0},
                                          {"b", 1.0},
                                          {"kb", 1e3},
                                          {"mb", 1e6},
                                          {"gb", 1e9},
                                          {"tb", 1e12},
                                          {"kib", 1024.0},
                                          {"mib", 1024.0 * 1024},
                                          {"gib", 1024.0 * 1024 * 1024},
                                          {"tib", 1024.0 * 1024 * 1024 * 1024}}};

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

Result<int64_t> ParseBytes(std::string_view text, std::string_view what) {
  const std::string bad =
      fmt::format("{}: '{}' is not a size (use bytes or units such as 16GiB, 16GB, 512MiB)", what, text);
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0) return BadInput(bad);
  double number = 0;
  try {
    size_t used = 0;
    number = std::stod(std::string(text.substr(0, i)), &used);
    if (used != i) return BadInput(bad);
  } catch (...) {
    return BadInput(bad);
  }
  std::string_view rest = text.substr(i);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  const std::string unit = Lower(rest);
  for (const Unit& u : kUnits) {
    if (unit == u.name) {
      const double bytes = number * u.factor;
      if (!std::isfinite(bytes) || bytes > 9.0e18) return BadInput(fmt::format("{}: '{}' is too large", what, text));
      return static_cast<int64_t>(std::llround(bytes));
    }
  }
  return BadInput(bad);
}

std::string FormatBytes(int64_t bytes) {
  constexpr std::array<std::string_view, 5> kNames = {"B", "KiB", "MiB", "GiB", "TiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (std::fabs(value) >= 1024.0 && unit + 1 < kNames.size()) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  const int decimals = std::fabs(value) >= 100 ? 0 : (std::fabs(value) >= 10 ? 1 : 2);
  return fmt::format("{:.{}f} {}", value, decimals, kNames[unit]);
}

std::string FormatSeconds(double seconds) {
  const double a = std::fabs(seconds);
  if (a >= 1.0 || a == 0.0) return fmt::format("{:.3g} s", seconds);
  if (a >= 1e-3) return fmt::format("{:.3g} ms", seconds * 1e3);
  return fmt::format("{:.3g} us", seconds * 1e6);
}

}  // namespace kiwi
