// Parses the CLI's `--shapes D0xK0,D1xK1,...` into a parameter list. A shape of more than
// two extents (A x B x C) is folded to (A, B * C); a single extent D means (D, 1).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tide/core/layout.hpp"

namespace tide::cli {

// Throws InvalidArgument naming the bad entry and its position.
// `option` names the flag (or the --groups entry) in error messages.
std::vector<ParamShape> parse_shapes(std::string_view text, std::string_view option = "--shapes");

struct NamedGroup {
  std::string name;  // "--shapes" or "NAME:GROUP"
  std::vector<ParamShape> params;
};

// The group named by exactly one of `--shapes` and `--model` (the other left empty).
NamedGroup resolve_group(const std::string& shapes, const std::string& model);

// `--groups "D0xK0,D1xK1;D2xK2;..."`: shape sets separated by ';', named `prefix` + index.
// Throws InvalidArgument naming an empty or bad entry.
std::vector<NamedGroup> parse_group_list(std::string_view text, const std::string& prefix);

}  // namespace tide::cli
