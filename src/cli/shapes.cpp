#include "shapes.hpp"

#include <charconv>
#include <limits>
#include <string>

#include "tide/core/error.hpp"
#include "tide/core/models.hpp"

namespace tide::cli {
namespace {

std::int64_t parse_extent(std::string_view token, std::string_view entry, std::size_t index,
                          std::string_view option) {
  std::int64_t value = 0;
  const auto [end, ec] = std::from_chars(token.data(), token.data() + token.size(), value);
  if (token.empty() || ec != std::errc{} || end != token.data() + token.size()) {
    throw InvalidArgument(std::string(option) + " entry " + std::to_string(index) + " '" +
                          std::string(entry) + "': '" + std::string(token) +
                          "' is not an integer extent (expected DxK, e.g. 8192x8192)");
  }
  if (value < 1) {
    throw InvalidArgument(std::string(option) + " entry " + std::to_string(index) + " '" +
                          std::string(entry) + "': extent " + std::to_string(value) +
                          " must be at least 1");
  }
  return value;
}

}  // namespace

std::vector<ParamShape> parse_shapes(std::string_view text, std::string_view option) {
  std::vector<ParamShape> params;
  if (text.empty()) {
    throw InvalidArgument(std::string(option) + " is empty; expected D0xK0,D1xK1,...");
  }
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::string_view entry = text.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    const std::size_t index = params.size();
    ParamShape shape;
    shape.name = "p" + std::to_string(index);
    std::size_t cursor = 0;
    bool first = true;
    shape.cols = 1;
    while (cursor <= entry.size()) {
      const std::size_t x = entry.find('x', cursor);
      const std::string_view token =
          entry.substr(cursor, x == std::string_view::npos ? std::string_view::npos : x - cursor);
      const std::int64_t extent = parse_extent(token, entry, index, option);
      if (first) {
        shape.rows = extent;
        first = false;
      } else {
        if (shape.cols > std::numeric_limits<std::int64_t>::max() / extent) {
          throw InvalidArgument(std::string(option) + " entry " + std::to_string(index) + " '" +
                                std::string(entry) + "' has more elements than 2^63");
        }
        shape.cols *= extent;
      }
      if (x == std::string_view::npos) break;
      cursor = x + 1;
    }
    params.push_back(std::move(shape));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  return params;
}

NamedGroup resolve_group(const std::string& shapes, const std::string& model) {
  if (shapes.empty() == model.empty()) {
    throw InvalidArgument("give exactly one of --shapes D0xK0,... or --model NAME");
  }
  if (!shapes.empty()) return {"--shapes", parse_shapes(shapes)};
  const ModelGroup& group = find_model_group(model);
  return {model.find(':') == std::string::npos ? model + ":" + group.name : model, group.params};
}

std::vector<NamedGroup> parse_group_list(std::string_view text, const std::string& prefix) {
  std::vector<NamedGroup> groups;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t end = text.find(';', start);
    const std::string_view entry =
        text.substr(start, end == std::string_view::npos ? end : end - start);
    const std::string name = prefix + std::to_string(groups.size());
    if (entry.empty()) {
      throw InvalidArgument("--groups " + name + " is empty (groups are separated by ';')");
    }
    groups.push_back({name, parse_shapes(entry, "--groups " + name)});
    if (end == std::string_view::npos) break;
    start = end + 1;
  }
  return groups;
}

}  // namespace tide::cli
