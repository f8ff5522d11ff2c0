// Weight table of Nemotron-H (modeling_nemotron_h.py). Under "backbone.": embeddings.weight
// [vocab, H]; per layer i: layers.i.norm.weight [H] and ONE block under layers.i.mixer.:
//   M (Mamba-2):  the Mamba2 mixer tensors (src/model/mamba2.cpp)
//   * (attention): q_proj [Hq·D, H], k_proj / v_proj [Hkv·D, H], o_proj [H, Hq·D]  (no RoPE)
//   - (MLP):      up_proj [I, H], down_proj [H, I]                      (relu², no gate)
//   E (MoE):      gate.weight [E, H], gate.e_score_correction_bias [E],
//                 experts.<e>.up_proj [I_moe, H], experts.<e>.down_proj [H, I_moe],
//                 shared_experts.up_proj [I_shared, H], shared_experts.down_proj [H, I_shared]
//                 (mlx-lm: switch_mlp.fc1 [E, I_moe, H], switch_mlp.fc2 [E, H, I_moe])
// then norm_f.weight [H] and lm_head.weight [vocab, H] unless tied.
#include <string>

#include "hybrid/core/error.h"
#include "model_impl.h"

namespace hybrid::model_detail {

namespace {

void add_moe(TableBuilder& b, const Config& c, const WeightLayout& layout, const std::string& p) {
  const MoeConfig& m = c.moe;
  const int64_t H = c.hidden_size, I = m.intermediate_size, E = m.num_experts;
  b.linear(p + "gate", E, H);
  b.plain(p + "gate.e_score_correction_bias", {E});
  switch (layout.experts) {
    case ExpertLayout::per_expert:
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "experts." + std::to_string(e) + ".";
        b.linear(x + "up_proj", I, H, c.mlp_bias);
        b.linear(x + "down_proj", H, I, c.mlp_bias);
      }
      break;
    case ExpertLayout::fused:
      b.stacked(p + "experts.up_proj", p + "experts.up_proj", E, I, H);
      b.stacked(p + "experts.down_proj", p + "experts.down_proj", E, H, I);
      break;
    case ExpertLayout::mlx_switch:
      // mlx-lm names the stacked up / down projections fc1 / fc2.
      b.stacked(p + "switch_mlp.fc1.weight", p + "switch_mlp.fc1", E, I, H);
      b.stacked(p + "switch_mlp.fc2.weight", p + "switch_mlp.fc2", E, H, I);
      break;
  }
  if (m.shared_intermediate_size > 0) {
    b.linear(p + "shared_experts.up_proj", m.shared_intermediate_size, H, c.mlp_bias);
    b.linear(p + "shared_experts.down_proj", H, m.shared_intermediate_size, c.mlp_bias);
  }
}

}  // namespace

void build_nemotron_h(const Config& c, const WeightLayout& layout, std::vector<TensorSpec>& out) {
  TableBuilder b(c, out);
  const std::string& P = layout.prefix;
  const int64_t H = c.hidden_size;
  const AttentionConfig& a = c.attention;
  b.linear(P + "embeddings", c.vocab_size, H);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = P + "layers." + std::to_string(i) + ".";
    const std::string x = l + "mixer.";
    const LayerSpec& spec = c.layers[static_cast<size_t>(i)];
    b.plain(l + "norm.weight", {H});
    if (spec.mixer == Mixer::mamba) {
      add_mamba_mixer(b, c, layout, l + "mixer");
    } else if (spec.mixer == Mixer::attention) {
      b.linear(x + "q_proj", a.num_heads * a.head_dim, H, a.bias);
      b.linear(x + "k_proj", a.num_kv_heads * a.head_dim, H, a.bias);
      b.linear(x + "v_proj", a.num_kv_heads * a.head_dim, H, a.bias);
      b.linear(x + "o_proj", H, a.num_heads * a.head_dim, a.bias);
    } else if (spec.ffn == Ffn::dense) {
      b.linear(x + "up_proj", c.intermediate_size, H, c.mlp_bias);
      b.linear(x + "down_proj", H, c.intermediate_size, c.mlp_bias);
    } else if (spec.ffn == Ffn::moe) {
      add_moe(b, c, layout, x);
    } else {
      fail("[model] ", c.path, ": layer ", i, " of a nemotron_h model has no block");
    }
  }
  b.plain(P + "norm_f.weight", {H});
  if (!c.tie_word_embeddings) b.linear(layout.lm_head, c.vocab_size, H);
}

}  // namespace hybrid::model_detail
