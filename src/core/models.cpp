// Parameter groups of three public models, as FSDP2 wraps them. Only shapes are recorded; every
// number comes from the models' public configurations and modeling code:
//   llama3.1-70b   https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
//   llama3.1-8b    https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
//                  transformers src/transformers/models/llama/modeling_llama.py
//                  (LlamaDecoderLayer, LlamaAttention, LlamaMLP)
//   qwen3-30b-a3b  https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json
//                  transformers src/transformers/models/qwen3_moe/modeling_qwen3_moe.py
//                  (Qwen3MoeDecoderLayer, Qwen3MoeAttention, Qwen3MoeSparseMoeBlock);
//                  fused experts as in torchtitan torchtitan/models/common/moe.py (GroupedExperts)
//   wan2.2-14b     https://github.com/Wan-Video/Wan2.2 wan/configs/wan_t2v_A14B.py and
//                  wan/modules/model.py (WanModel, WanAttentionBlock, Head); in_dim, out_dim and
//                  text_dim are WanModel's defaults, as in the released T2V 14B config.json files
// A parameter of shape (d0, d1, ..., dk) is recorded as rows = d0, cols = d1 * ... * dk (1 for a
// 1-D parameter). Parameters are listed in nn.Module.named_parameters() order, the order FSDP2
// collects them in: a module's own parameters first, then its children in registration order.
#include "tide/core/models.hpp"

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tide/core/error.hpp"

namespace tide {
namespace {

// A parameter of the given PyTorch shape, folded to its (D, K) view.
ParamShape param(std::string name, std::initializer_list<std::int64_t> dims) {
  ParamShape p;
  p.name = std::move(name);
  p.rows = *dims.begin();
  p.cols = 1;
  for (auto it = dims.begin() + 1; it != dims.end(); ++it)
    p.cols *= *it;
  return p;
}

// The weight (out, in) and, where the layer has one, the bias (out) of an nn.Linear.
void add_linear(std::vector<ParamShape>& params, const std::string& prefix, std::int64_t in,
                std::int64_t out, bool bias) {
  params.push_back(param(prefix + ".weight", {out, in}));
  if (bias) params.push_back(param(prefix + ".bias", {out}));
}

// --- Llama-3.1 (8B, 70B) ------------------------------------------------------------------------
// Llama-3.1-70B config.json: hidden_size 8192, intermediate_size 28672, num_attention_heads 64,
// num_key_value_heads 8 (head_dim 8192 / 64 = 128), num_hidden_layers 80, vocab_size 128256,
// attention_bias false, mlp_bias false, tie_word_embeddings false.
// Llama-3.1-8B config.json: hidden_size 4096, intermediate_size 14336, num_attention_heads 32,
// num_key_value_heads 8 (head_dim 128), num_hidden_layers 32, vocab_size 128256, the same flags.
struct LlamaConfig {
  const char* name;
  const char* description;
  const char* source;
  std::int64_t hidden, ffn, heads, kv_heads, vocab;
  int layers;
};

ModelPreset llama31(const LlamaConfig& c) {
  const std::int64_t head_dim = c.hidden / c.heads;
  ModelGroup layer{
      "layer", "one LlamaDecoderLayer (self_attn, mlp, input/post_attention norms)", {}};
  auto& p = layer.params;
  add_linear(p, "self_attn.q_proj", c.hidden, c.heads * head_dim, false);
  add_linear(p, "self_attn.k_proj", c.hidden, c.kv_heads * head_dim, false);
  add_linear(p, "self_attn.v_proj", c.hidden, c.kv_heads * head_dim, false);
  add_linear(p, "self_attn.o_proj", c.heads * head_dim, c.hidden, false);
  add_linear(p, "mlp.gate_proj", c.hidden, c.ffn, false);
  add_linear(p, "mlp.up_proj", c.hidden, c.ffn, false);
  add_linear(p, "mlp.down_proj", c.ffn, c.hidden, false);
  p.push_back(param("input_layernorm.weight", {c.hidden}));
  p.push_back(param("post_attention_layernorm.weight", {c.hidden}));

  ModelGroup embedding{"embedding",
                       "the token embedding (model.embed_tokens)",
                       {param("model.embed_tokens.weight", {c.vocab, c.hidden})}};
  ModelGroup output{
      "output",
      "the final RMSNorm (model.norm) and the untied lm_head",
      {param("model.norm.weight", {c.hidden}), param("lm_head.weight", {c.vocab, c.hidden})}};
  return ModelPreset{c.name,
                     c.description,
                     c.source,
                     c.layers,
                     {std::move(layer), std::move(embedding), std::move(output)}};
}

ModelPreset llama31_70b() {
  return llama31({"llama3.1-70b",
                  "Llama-3.1-70B: dense decoder, hidden 8192, FFN 28672, GQA 64/8 heads, 80 "
                  "layers",
                  "https://huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json; "
                  "https://github.com/huggingface/transformers/blob/main/src/transformers/"
                  "models/llama/modeling_llama.py",
                  8192, 28672, 64, 8, 128256, 80});
}

ModelPreset llama31_8b() {
  return llama31({"llama3.1-8b",
                  "Llama-3.1-8B: dense decoder, hidden 4096, FFN 14336, GQA 32/8 heads, 32 layers",
                  "https://huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json; "
                  "https://github.com/huggingface/transformers/blob/main/src/transformers/"
                  "models/llama/modeling_llama.py",
                  4096, 14336, 32, 8, 128256, 32});
}

// --- Qwen3-30B-A3B ----------------------------------------------------------------------------
// config.json: hidden_size 2048, num_attention_heads 32, num_key_value_heads 4, head_dim 128,
// moe_intermediate_size 768, num_experts 128, num_experts_per_tok 8, num_hidden_layers 48,
// decoder_sparse_step 1, mlp_only_layers [] (every layer is MoE), vocab_size 151936,
// attention_bias false, tie_word_embeddings false. q_norm/k_norm are RMSNorms over head_dim.
constexpr std::int64_t kQwenHidden = 2048;
constexpr std::int64_t kQwenHeads = 32;
constexpr std::int64_t kQwenKvHeads = 4;
constexpr std::int64_t kQwenHeadDim = 128;
constexpr std::int64_t kQwenExpertFfn = 768;
constexpr std::int64_t kQwenExperts = 128;
constexpr std::int64_t kQwenVocab = 151936;

void add_qwen_attention(std::vector<ParamShape>& p) {
  add_linear(p, "self_attn.q_proj", kQwenHidden, kQwenHeads * kQwenHeadDim, false);
  add_linear(p, "self_attn.k_proj", kQwenHidden, kQwenKvHeads * kQwenHeadDim, false);
  add_linear(p, "self_attn.v_proj", kQwenHidden, kQwenKvHeads * kQwenHeadDim, false);
  add_linear(p, "self_attn.o_proj", kQwenHeads * kQwenHeadDim, kQwenHidden, false);
  p.push_back(param("self_attn.q_norm.weight", {kQwenHeadDim}));
  p.push_back(param("self_attn.k_norm.weight", {kQwenHeadDim}));
}

ModelPreset qwen3_30b_a3b() {
  ModelGroup layer{"layer",
                   "one Qwen3MoeDecoderLayer with the 128 routed experts fused into three 3-D "
                   "tensors (torchtitan GroupedExperts w1/w2/w3)",
                   {}};
  {
    auto& p = layer.params;
    add_qwen_attention(p);
    add_linear(p, "mlp.gate", kQwenHidden, kQwenExperts, false);  // the router
    // (num_experts, out, in): w1 = gate_proj, w2 = down_proj, w3 = up_proj of every expert.
    p.push_back(param("mlp.experts.w1", {kQwenExperts, kQwenExpertFfn, kQwenHidden}));
    p.push_back(param("mlp.experts.w2", {kQwenExperts, kQwenHidden, kQwenExpertFfn}));
    p.push_back(param("mlp.experts.w3", {kQwenExperts, kQwenExpertFfn, kQwenHidden}));
    p.push_back(param("input_layernorm.weight", {kQwenHidden}));
    p.push_back(param("post_attention_layernorm.weight", {kQwenHidden}));
  }

  ModelGroup per_expert{"layer-per-expert",
                        "one Qwen3MoeDecoderLayer with 128 separate expert MLPs (Hugging Face "
                        "Qwen3MoeSparseMoeBlock): 393 parameters, past TIDE's 256 limit",
                        {}};
  {
    auto& p = per_expert.params;
    add_qwen_attention(p);
    add_linear(p, "mlp.gate", kQwenHidden, kQwenExperts, false);
    for (std::int64_t e = 0; e < kQwenExperts; ++e) {
      const std::string prefix = "mlp.experts." + std::to_string(e);
      add_linear(p, prefix + ".gate_proj", kQwenHidden, kQwenExpertFfn, false);
      add_linear(p, prefix + ".up_proj", kQwenHidden, kQwenExpertFfn, false);
      add_linear(p, prefix + ".down_proj", kQwenExpertFfn, kQwenHidden, false);
    }
    p.push_back(param("input_layernorm.weight", {kQwenHidden}));
    p.push_back(param("post_attention_layernorm.weight", {kQwenHidden}));
  }

  ModelGroup embedding{"embedding",
                       "the token embedding (model.embed_tokens)",
                       {param("model.embed_tokens.weight", {kQwenVocab, kQwenHidden})}};
  ModelGroup output{"output",
                    "the final RMSNorm (model.norm) and the untied lm_head",
                    {param("model.norm.weight", {kQwenHidden}),
                     param("lm_head.weight", {kQwenVocab, kQwenHidden})}};

  return ModelPreset{
      "qwen3-30b-a3b",
      "Qwen3-30B-A3B: MoE decoder, hidden 2048, 128 experts of FFN 768 (8 active), "
      "GQA 32/4 heads, 48 layers",
      "https://huggingface.co/Qwen/Qwen3-30B-A3B/blob/main/config.json; "
      "https://github.com/huggingface/transformers/blob/main/src/transformers/"
      "models/qwen3_moe/modeling_qwen3_moe.py; "
      "https://github.com/pytorch/torchtitan/blob/main/torchtitan/models/common/"
      "moe.py",
      48,
      {std::move(layer), std::move(per_expert), std::move(embedding), std::move(output)}};
}

// --- Wan2.2-T2V-A14B, high-noise expert -------------------------------------------------------
// wan/configs/wan_t2v_A14B.py: patch_size (1, 2, 2), dim 5120, ffn_dim 13824, freq_dim 256,
// num_heads 40, num_layers 40, qk_norm True, cross_attn_norm True. WanModel defaults (the T2V
// config.json leaves them unchanged): in_dim 16, out_dim 16, text_dim 4096.
// Every nn.Linear of the model has a bias; norm1, norm2 and head.norm are LayerNorms without
// affine parameters; norm3 (cross_attn_norm) is affine; norm_q/norm_k are RMSNorms over dim.
constexpr std::int64_t kWanDim = 5120;
constexpr std::int64_t kWanFfn = 13824;
constexpr std::int64_t kWanFreq = 256;
constexpr std::int64_t kWanText = 4096;
constexpr std::int64_t kWanIn = 16;
constexpr std::int64_t kWanOut = 16;
constexpr std::int64_t kWanPatchT = 1;
constexpr std::int64_t kWanPatchH = 2;
constexpr std::int64_t kWanPatchW = 2;

// WanSelfAttention / WanCrossAttention: q, k, v, o (dim -> dim, with bias), norm_q, norm_k.
void add_wan_attention(std::vector<ParamShape>& p, const std::string& prefix) {
  for (const char* proj : {".q", ".k", ".v", ".o"})
    add_linear(p, prefix + proj, kWanDim, kWanDim, true);
  p.push_back(param(prefix + ".norm_q.weight", {kWanDim}));
  p.push_back(param(prefix + ".norm_k.weight", {kWanDim}));
}

ModelPreset wan22_14b() {
  ModelGroup layer{
      "layer", "one WanAttentionBlock (modulation, self_attn, norm3, cross_attn, ffn)", {}};
  {
    auto& p = layer.params;
    // The block's own parameter precedes its submodules' in named_parameters() order.
    p.push_back(param("modulation", {1, 6, kWanDim}));
    add_wan_attention(p, "self_attn");
    p.push_back(param("norm3.weight", {kWanDim}));
    p.push_back(param("norm3.bias", {kWanDim}));
    add_wan_attention(p, "cross_attn");
    add_linear(p, "ffn.0", kWanDim, kWanFfn, true);
    add_linear(p, "ffn.2", kWanFfn, kWanDim, true);
  }

  ModelGroup embedding{
      "embedding", "patch_embedding (Conv3d), text_embedding, time_embedding, time_projection", {}};
  {
    auto& p = embedding.params;
    p.push_back(
        param("patch_embedding.weight", {kWanDim, kWanIn, kWanPatchT, kWanPatchH, kWanPatchW}));
    p.push_back(param("patch_embedding.bias", {kWanDim}));
    add_linear(p, "text_embedding.0", kWanText, kWanDim, true);
    add_linear(p, "text_embedding.2", kWanDim, kWanDim, true);
    add_linear(p, "time_embedding.0", kWanFreq, kWanDim, true);
    add_linear(p, "time_embedding.2", kWanDim, kWanDim, true);
    add_linear(p, "time_projection.1", kWanDim, 6 * kWanDim, true);
  }

  ModelGroup output{"output", "the Head: its modulation and its Linear (head.head)", {}};
  {
    auto& p = output.params;
    p.push_back(param("head.modulation", {1, 2, kWanDim}));
    add_linear(p, "head.head", kWanDim, kWanPatchT * kWanPatchH * kWanPatchW * kWanOut, true);
  }

  return ModelPreset{"wan2.2-14b",
                     "Wan2.2-T2V-A14B high-noise expert: dense video DiT, dim 5120, FFN 13824, 40 "
                     "heads, 40 blocks",
                     "https://github.com/Wan-Video/Wan2.2/blob/main/wan/configs/wan_t2v_A14B.py; "
                     "https://github.com/Wan-Video/Wan2.2/blob/main/wan/modules/model.py",
                     40,
                     {std::move(layer), std::move(embedding), std::move(output)}};
}

std::string valid_choices() {
  std::string out;
  for (const ModelPreset& preset : model_presets()) {
    if (!out.empty()) out += ", ";
    out += preset.name;
    for (const ModelGroup& group : preset.groups)
      out += ", " + preset.name + ":" + group.name;
  }
  return out;
}

}  // namespace

const std::vector<ModelPreset>& model_presets() {
  static const std::vector<ModelPreset> presets = {llama31_70b(), llama31_8b(), qwen3_30b_a3b(),
                                                   wan22_14b()};
  return presets;
}

const ModelGroup& find_model_group(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  const bool has_group = colon != std::string_view::npos;
  const std::string_view group = has_group ? spec.substr(colon + 1) : std::string_view{};
  for (const ModelPreset& preset : model_presets()) {
    if (preset.name != name) continue;
    if (!has_group) return preset.groups.front();
    for (const ModelGroup& g : preset.groups) {
      if (g.name == group) return g;
    }
  }
  throw InvalidArgument("unknown model '" + std::string(spec) +
                        "': expected NAME or NAME:GROUP, one of " + valid_choices());
}

}  // namespace tide
