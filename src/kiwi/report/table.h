#pragma once
// Plain-text tables for human output:
//   Table t({"plan", "peak memory", "time"});
//   t.AddRow({"DP x8", "3.1 GiB", "12.3 ms"});
//   std::cout << t.Render();
// Columns whose cells all look numeric (digits, units, '%', 'x') are right-aligned.
#include <string>
#include <vector>

namespace kiwi::report {

class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> cells);  // pads or truncates to the header count
  std::string Render() const;                   // header, rule, rows; ends with '\n'
  size_t rows() const { return rows_.size(); }

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace kiwi::report
