// Tests of the model presets: group sizes, exact shapes, totals against the published model sizes,
// and the spec lookup.
#include "tide/core/models.hpp"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "tide/core/error.hpp"
#include "tide/core/layout.hpp"

namespace tide {
namespace {

std::int64_t elements(const ModelGroup& group) {
  std::int64_t total = 0;
  for (const ParamShape& p : group.params)
    total += p.rows * p.cols;
  return total;
}

// Parameters of the whole model: layer_count layer groups plus the embedding and output groups.
std::int64_t model_elements(const std::string& name) {
  for (const ModelPreset& preset : model_presets()) {
    if (preset.name != name) continue;
    return elements(find_model_group(name + ":layer")) * preset.layer_count +
           elements(find_model_group(name + ":embedding")) +
           elements(find_model_group(name + ":output"));
  }
  ADD_FAILURE() << "no preset " << name;
  return 0;
}

const ParamShape& find_param(const ModelGroup& group, const std::string& name) {
  for (const ParamShape& p : group.params) {
    if (p.name == name) return p;
  }
  ADD_FAILURE() << "no parameter " << name << " in group " << group.name;
  static const ParamShape missing;
  return missing;
}

void expect_shape(const ModelGroup& group, const std::string& name, std::int64_t rows,
                  std::int64_t cols) {
  const ParamShape& p = find_param(group, name);
  EXPECT_EQ(p.rows, rows) << name;
  EXPECT_EQ(p.cols, cols) << name;
}

// Llama-3.1-8B's config.json: hidden 4096, FFN 14336, 32 heads, 8 KV heads of 128.
TEST(Models, Llama8bLayer) {
  const ModelGroup& layer = find_model_group("llama3.1-8b");
  ASSERT_EQ(layer.params.size(), 9u);
  expect_shape(layer, "self_attn.q_proj.weight", 4096, 4096);
  expect_shape(layer, "self_attn.k_proj.weight", 1024, 4096);
  expect_shape(layer, "self_attn.v_proj.weight", 1024, 4096);
  expect_shape(layer, "self_attn.o_proj.weight", 4096, 4096);
  expect_shape(layer, "mlp.gate_proj.weight", 14336, 4096);
  expect_shape(layer, "mlp.up_proj.weight", 14336, 4096);
  expect_shape(layer, "mlp.down_proj.weight", 4096, 14336);
  expect_shape(layer, "input_layernorm.weight", 4096, 1);
}

TEST(Models, PresetsInFixedOrder) {
  const auto& presets = model_presets();
  ASSERT_EQ(presets.size(), 4u);
  EXPECT_EQ(presets[0].name, "llama3.1-70b");
  EXPECT_EQ(presets[1].name, "llama3.1-8b");
  EXPECT_EQ(presets[2].name, "qwen3-30b-a3b");
  EXPECT_EQ(presets[3].name, "wan2.2-14b");
  EXPECT_EQ(presets[0].layer_count, 80);
  EXPECT_EQ(presets[1].layer_count, 32);
  EXPECT_EQ(presets[2].layer_count, 48);
  EXPECT_EQ(presets[3].layer_count, 40);
  for (const ModelPreset& preset : presets) {
    EXPECT_EQ(preset.groups.front().name, "layer") << preset.name;
    EXPECT_FALSE(preset.source.empty()) << preset.name;
    EXPECT_FALSE(preset.description.empty()) << preset.name;
    for (const ModelGroup& group : preset.groups) {
      EXPECT_FALSE(group.description.empty()) << preset.name << ":" << group.name;
      for (const ParamShape& p : group.params) {
        EXPECT_GT(p.rows, 0) << p.name;
        EXPECT_GT(p.cols, 0) << p.name;
      }
    }
  }
  // The table is built once: repeated calls return the same object.
  EXPECT_EQ(&model_presets(), &presets);
}

TEST(Models, ParameterCountsPerGroup) {
  EXPECT_EQ(find_model_group("llama3.1-70b").params.size(), 9u);
  EXPECT_EQ(find_model_group("llama3.1-70b:embedding").params.size(), 1u);
  EXPECT_EQ(find_model_group("llama3.1-70b:output").params.size(), 2u);

  // 4 projections + q_norm + k_norm, the router, w1/w2/w3, two RMSNorms.
  EXPECT_EQ(find_model_group("qwen3-30b-a3b").params.size(), 12u);
  // 6 attention + router + 128 * 3 expert Linears + 2 norms.
  EXPECT_EQ(find_model_group("qwen3-30b-a3b:layer-per-expert").params.size(), 393u);
  EXPECT_EQ(find_model_group("qwen3-30b-a3b:embedding").params.size(), 1u);
  EXPECT_EQ(find_model_group("qwen3-30b-a3b:output").params.size(), 2u);

  // modulation + 10 (self_attn) + norm3 weight/bias + 10 (cross_attn) + 4 (ffn).
  EXPECT_EQ(find_model_group("wan2.2-14b").params.size(), 27u);
  EXPECT_EQ(find_model_group("wan2.2-14b:embedding").params.size(), 12u);
  EXPECT_EQ(find_model_group("wan2.2-14b:output").params.size(), 3u);
}

TEST(Models, LayerGroupsFitTideAndPerExpertGroupDoesNot) {
  for (const ModelPreset& preset : model_presets()) {
    EXPECT_LE(static_cast<int>(preset.groups.front().params.size()), kMaxParamsPerGroup)
        << preset.name;
  }
  EXPECT_GT(static_cast<int>(find_model_group("qwen3-30b-a3b:layer-per-expert").params.size()),
            kMaxParamsPerGroup);
}

TEST(Models, BareNameIsTheLayerGroup) {
  for (const ModelPreset& preset : model_presets()) {
    EXPECT_EQ(&find_model_group(preset.name), &preset.groups.front());
    EXPECT_EQ(&find_model_group(preset.name + ":layer"), &preset.groups.front());
  }
}

TEST(Models, LlamaShapes) {
  const ModelGroup& layer = find_model_group("llama3.1-70b");
  EXPECT_EQ(layer.params.front().name, "self_attn.q_proj.weight");
  expect_shape(layer, "self_attn.q_proj.weight", 8192, 8192);
  expect_shape(layer, "self_attn.k_proj.weight", 1024, 8192);
  expect_shape(layer, "self_attn.v_proj.weight", 1024, 8192);
  expect_shape(layer, "self_attn.o_proj.weight", 8192, 8192);
  expect_shape(layer, "mlp.gate_proj.weight", 28672, 8192);
  expect_shape(layer, "mlp.down_proj.weight", 8192, 28672);
  expect_shape(layer, "input_layernorm.weight", 8192, 1);
  EXPECT_EQ(layer.params.back().name, "post_attention_layernorm.weight");
  expect_shape(find_model_group("llama3.1-70b:embedding"), "model.embed_tokens.weight", 128256,
               8192);
  expect_shape(find_model_group("llama3.1-70b:output"), "lm_head.weight", 128256, 8192);
}

TEST(Models, QwenShapes) {
  const ModelGroup& layer = find_model_group("qwen3-30b-a3b");
  expect_shape(layer, "self_attn.q_proj.weight", 4096, 2048);
  expect_shape(layer, "self_attn.k_proj.weight", 512, 2048);
  expect_shape(layer, "self_attn.o_proj.weight", 2048, 4096);
  expect_shape(layer, "self_attn.q_norm.weight", 128, 1);
  expect_shape(layer, "mlp.gate.weight", 128, 2048);
  expect_shape(layer, "mlp.experts.w1", 128, 768 * 2048);
  expect_shape(layer, "mlp.experts.w2", 128, 2048 * 768);
  expect_shape(layer, "mlp.experts.w3", 128, 768 * 2048);

  const ModelGroup& per_expert = find_model_group("qwen3-30b-a3b:layer-per-expert");
  expect_shape(per_expert, "mlp.experts.0.gate_proj.weight", 768, 2048);
  expect_shape(per_expert, "mlp.experts.127.down_proj.weight", 2048, 768);
  // Both views hold the same number of elements.
  EXPECT_EQ(elements(per_expert), elements(layer));
}

TEST(Models, WanShapes) {
  const ModelGroup& layer = find_model_group("wan2.2-14b");
  EXPECT_EQ(layer.params.front().name, "modulation");
  expect_shape(layer, "modulation", 1, 6 * 5120);
  expect_shape(layer, "self_attn.q.weight", 5120, 5120);
  expect_shape(layer, "self_attn.q.bias", 5120, 1);
  expect_shape(layer, "self_attn.norm_k.weight", 5120, 1);
  expect_shape(layer, "norm3.weight", 5120, 1);
  expect_shape(layer, "cross_attn.norm_q.weight", 5120, 1);
  expect_shape(layer, "ffn.0.weight", 13824, 5120);
  expect_shape(layer, "ffn.2.weight", 5120, 13824);
  EXPECT_EQ(layer.params.back().name, "ffn.2.bias");

  const ModelGroup& embedding = find_model_group("wan2.2-14b:embedding");
  expect_shape(embedding, "patch_embedding.weight", 5120, 16 * 1 * 2 * 2);
  expect_shape(embedding, "text_embedding.0.weight", 5120, 4096);
  expect_shape(embedding, "time_embedding.0.weight", 5120, 256);
  expect_shape(embedding, "time_projection.1.weight", 6 * 5120, 5120);

  const ModelGroup& output = find_model_group("wan2.2-14b:output");
  expect_shape(output, "head.modulation", 1, 2 * 5120);
  expect_shape(output, "head.head.weight", 64, 5120);
}

// Reference totals, each within 1%:
//  * Llama-3.1-70B: 70.6e9, the "Model size: 70.6B params" Hugging Face reports from the
//    safetensors of Llama-3.1-70B checkpoints (Meta's nominal "70B"). Our table gives 80 *
//    855,654,400 + 1,050,673,152 (embedding)
//    + 1,050,681,344 (norm + lm_head) = 70,553,706,496.
//  * Qwen3-30B-A3B: 30.5e9 total, the model card's "Number of Parameters: 30.5B in total"
//    (29.9B non-embedding). Our table gives 48 * 623,120,640 + 2 * 311,164,928 + 2,048
//    = 30,532,122,624.
//  * Wan2.2 high-noise expert: 14.3e9 = the 28.6 GB fp16 checkpoint of one A14B expert
//    (wan2.2_t2v_high_noise_14B_fp16.safetensors) / 2 bytes; the model's nominal "14B" is
//    rounded down. Our table gives 40 * 351,394,304 + 232,381,440 + 337,984 = 14,288,491,584.
TEST(Models, TotalsMatchPublishedSizes) {
  EXPECT_EQ(model_elements("llama3.1-70b"), 70'553'706'496);
  EXPECT_NEAR(static_cast<double>(model_elements("llama3.1-70b")), 70.6e9, 0.01 * 70.6e9);

  EXPECT_EQ(model_elements("qwen3-30b-a3b"), 30'532'122'624);
  EXPECT_NEAR(static_cast<double>(model_elements("qwen3-30b-a3b")), 30.5e9, 0.01 * 30.5e9);
  // Non-embedding parameters: the model card's 29.9B.
  EXPECT_NEAR(static_cast<double>(elements(find_model_group("qwen3-30b-a3b")) * 48), 29.9e9,
              0.01 * 29.9e9);

  EXPECT_EQ(model_elements("wan2.2-14b"), 14'288'491'584);
  EXPECT_NEAR(static_cast<double>(model_elements("wan2.2-14b")), 14.3e9, 0.01 * 14.3e9);
}

TEST(Models, UnknownSpecListsEveryChoice) {
  for (const char* bad : {"llama", "gpt-4", "llama3.1-70b:", "llama3.1-70b:mlp",
                          "qwen3-30b-a3b:layer:x", ":layer", ""}) {
    try {
      find_model_group(bad);
      ADD_FAILURE() << "no exception for '" << bad << "'";
    } catch (const InvalidArgument& e) {
      const std::string message = e.what();
      EXPECT_NE(message.find("'" + std::string(bad) + "'"), std::string::npos) << message;
      EXPECT_EQ(message.find('\n'), std::string::npos) << message;
      for (const ModelPreset& preset : model_presets()) {
        EXPECT_NE(message.find(preset.name), std::string::npos) << message;
        for (const ModelGroup& group : preset.groups) {
          EXPECT_NE(message.find(preset.name + ":" + group.name), std::string::npos) << message;
        }
      }
    }
  }
}

}  // namespace
}  // namespace tide
