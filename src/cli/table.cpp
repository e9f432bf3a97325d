#include "table.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <ostream>

namespace tide::cli {
namespace {

bool is_numeric(const std::string& cell) {
  return !cell.empty() &&
         (std::isdigit(static_cast<unsigned char>(cell[0])) || (cell[0] == '-' && cell.size() > 1));
}

}  // namespace

Table::Table(std::vector<std::string> header) : header_(std::move(header)) {}

Table& Table::row(std::vector<std::string> cells) {
  cells.resize(header_.size());
  rows_.push_back(std::move(cells));
  return *this;
}

void Table::print(std::ostream& out, const std::string& indent) const {
  std::vector<std::size_t> width(header_.size());
  for (std::size_t c = 0; c < header_.size(); ++c) {
    width[c] = header_[c].size();
    for (const auto& r : rows_)
      width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells, bool header) {
    std::string text = indent;
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const bool right = !header && right_align_numbers_ && is_numeric(cells[c]);
      text += right ? fmt::format("{:>{}}", cells[c], width[c])
                    : fmt::format("{:<{}}", cells[c], width[c]);
      if (c + 1 < cells.size()) text += "  ";
    }
    while (!text.empty() && text.back() == ' ')
      text.pop_back();
    out << text << '\n';
  };
  line(header_, true);
  for (const auto& r : rows_)
    line(r, false);
}

std::string num(std::int64_t value) {
  const std::string digits = std::to_string(value < 0 ? -value : value);
  std::string grouped = value < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i != 0 && (digits.size() - i) % 3 == 0) grouped += ',';
    grouped += digits[i];
  }
  return grouped;
}

std::string bytes(std::int64_t value) {
  static constexpr std::array<const char*, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  double scaled = static_cast<double>(value);
  std::size_t unit = 0;
  while (scaled >= 1024.0 && unit + 1 < kUnits.size()) {
    scaled /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", value);
  return fmt::format("{:.2f} {}", scaled, kUnits[unit]);
}

std::string fixed(double value, int digits) {
  return fmt::format("{:.{}f}", value, digits);
}

}  // namespace tide::cli
