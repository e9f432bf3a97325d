// Parameter groups of real models, from their public configurations, as FSDP2 wraps them:
// one group per repeated block (the "layer" group) plus the embedding and output groups.
// Usable wherever the CLI takes shapes (`--model NAME` or `--model NAME:GROUP`).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "tide/core/layout.hpp"

namespace tide {

struct ModelGroup {
  std::string name;                // "layer", "embedding", "output", ...
  std::string description;         // one line: which module(s) of the model the group holds
  std::vector<ParamShape> params;  // in the model's registration (FSDP2) order
};

struct ModelPreset {
  std::string name;                // CLI name, e.g. "llama3.1-70b"
  std::string description;         // one line
  std::string source;              // where the configuration comes from (URL of config / code)
  int layer_count = 0;             // how many times the "layer" group repeats
  std::vector<ModelGroup> groups;  // groups[0] is the repeated layer group
};

// Every preset, in a fixed order.
const std::vector<ModelPreset>& model_presets();

// Resolves "NAME" (its layer group) or "NAME:GROUP". Throws InvalidArgument that lists the
// known names when nothing matches.
const ModelGroup& find_model_group(std::string_view spec);

}  // namespace tide
