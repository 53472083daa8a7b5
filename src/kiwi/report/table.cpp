#include "kiwi/report/table.h"

#include <algorithm>
#include <cctype>

namespace kiwi::report {
namespace {

bool LooksNumeric(const std::string& cell) {
  if (cell.empty() || cell == "-") return true;
  return std::isdigit(static_cast<unsigned char>(cell.front())) != 0;
}

std::string Pad(const std::string& s, size_t width, bool right) {
  if (s.size() >= width) return s;
  const std::string fill(width - s.size(), ' ');
  return right ? fill + s : s + fill;
}

}  // namespace

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render() const {
  const size_t n = headers_.size();
  std::vector<size_t> width(n);
  std::vector<bool> right(n, true);
  for (size_t c = 0; c < n; ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) {
      width[c] = std::max(width[c], row[c].size());
      if (!LooksNumeric(row[c])) right[c] = false;
    }
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text;
    for (size_t c = 0; c < n; ++c) text += (c ? "  " : "") + Pad(cells[c], width[c], right[c]);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + '\n';
  };
  line(headers_);
  std::vector<std::string> rule(n);
  for (size_t c = 0; c < n; ++c) rule[c] = std::string(width[c], '-');
  line(rule);
  for (const auto& row : rows_) line(row);
  return out;
}

}  // namespace kiwi::report
