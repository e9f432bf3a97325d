// A plain-text table for the CLI's human-readable output: a header row, then rows of
// cells; numbers right-aligned, text left-aligned, columns as wide as their widest cell.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>
#include <vector>

namespace tide::cli {

class Table {
 public:
  explicit Table(std::vector<std::string> header);
  Table& row(std::vector<std::string> cells);
  // Left-align every column (by default cells that start with a digit are right-aligned).
  Table& left_aligned() {
    right_align_numbers_ = false;
    return *this;
  }
  void print(std::ostream& out, const std::string& indent = "  ") const;

 private:
  std::vector<std::string> header_;
  std::vector<std::vector<std::string>> rows_;
  bool right_align_numbers_ = true;
};

std::string num(std::int64_t value);    // 1234567 -> "1,234,567"
std::string bytes(std::int64_t value);  // "1.50 GiB (1,610,612,736 B)"
std::string fixed(double value, int digits);

}  // namespace tide::cli
