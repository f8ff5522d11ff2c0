// Weight table of Qwen3-Next (qwen3_next), Qwen3.5 dense (qwen3_5) and Qwen3.5 MoE (qwen3_5_moe),
// as transformers names them (modeling_qwen3_next.py, modular_qwen3_5.py). Per layer i under
// "<prefix>layers.i.":
//   input_layernorm.weight [H], post_attention_layernorm.weight [H]      zero-centred RMSNorm
//   GDN (linear_attention):
//     qwen3_next: linear_attn.in_proj_qkvz [2·Hk·K + 2·Hv·V, H]  (interleaved by key-head group)
//                 linear_attn.in_proj_ba   [2·Hv, H]
//     qwen3_5:    linear_attn.in_proj_qkv [2·Hk·K + Hv·V, H], in_proj_z [Hv·V, H],
//                 in_proj_b [Hv, H], in_proj_a [Hv, H]
//     linear_attn.conv1d.weight [conv_dim, 1, W], dt_bias [Hv], A_log [Hv], norm.weight [V],
//     linear_attn.out_proj.weight [H, Hv·V]
//   attention (full_attention): self_attn.q_proj [2·Hq·D, H] (per head [q | gate]),
//     k_proj / v_proj [Hkv·D, H], o_proj [H, Hq·D], q_norm / k_norm [D]
//   MoE: mlp.gate [E, H]; experts (per_expert | fused | mlx_switch);
//   shared_expert.{gate,up,down}_proj,
//     shared_expert_gate [1, H].  Dense: mlp.{gate,up}_proj [I, H], mlp.down_proj [H, I].
// Outside the layers: embed_tokens [vocab, H], norm [H], lm_head [vocab, H] (unless tied).
#include <string>

#include "hybrid/core/error.h"
#include "model_impl.h"

namespace hybrid::model_detail {

namespace {

void add_gdn(TableBuilder& b, const Config& c, const WeightLayout& layout, const std::string& p) {
  const GdnConfig& g = c.gdn;
  const int64_t H = c.hidden_size;
  if (c.arch == Arch::qwen3_next) {
    b.linear(p + "in_proj_qkvz", 2 * g.key_dim() + 2 * g.value_dim(), H);
    b.linear(p + "in_proj_ba", 2 * g.num_v_heads, H);
  } else {
    b.linear(p + "in_proj_qkv", g.conv_dim(), H);
    b.linear(p + "in_proj_z", g.value_dim(), H);
    b.linear(p + "in_proj_b", g.num_v_heads, H);
    b.linear(p + "in_proj_a", g.num_v_heads, H);
  }
  b.plain(p + "conv1d.weight", conv_weight_shape(layout, g.conv_dim(), g.conv_kernel));
  b.plain(p + "dt_bias", {g.num_v_heads});
  b.plain(p + "A_log", {g.num_v_heads});
  b.plain(p + "norm.weight", {g.v_head_dim});
  b.linear(p + "out_proj", H, g.value_dim());
}

void add_attention(TableBuilder& b, const Config& c, const std::string& p) {
  const AttentionConfig& a = c.attention;
  const int64_t H = c.hidden_size;
  b.linear(p + "q_proj", a.num_heads * a.head_dim * (a.output_gate ? 2 : 1), H, a.bias);
  b.linear(p + "k_proj", a.num_kv_heads * a.head_dim, H, a.bias);
  b.linear(p + "v_proj", a.num_kv_heads * a.head_dim, H, a.bias);
  b.linear(p + "o_proj", H, a.num_heads * a.head_dim, a.bias);
  b.plain(p + "q_norm.weight", {a.head_dim});
  b.plain(p + "k_norm.weight", {a.head_dim});
}

void add_moe(TableBuilder& b, const Config& c, const WeightLayout& layout, const std::string& p) {
  const MoeConfig& m = c.moe;
  const int64_t H = c.hidden_size, I = m.intermediate_size, E = m.num_experts;
  b.linear(p + "gate", E, H);
  switch (layout.experts) {
    case ExpertLayout::per_expert:
      for (int64_t e = 0; e < E; ++e) {
        const std::string x = p + "experts." + std::to_string(e) + ".";
        b.linear(x + "gate_proj", I, H);
        b.linear(x + "up_proj", I, H);
        b.linear(x + "down_proj", H, I);
      }
      break;
    case ExpertLayout::fused:
      // gate_up_proj rows 0..I-1 are gate, I..2I-1 up (chunk(2) along dim -2).
      b.stacked(p + "experts.gate_up_proj", p + "experts.gate_up_proj", E, 2 * I, H);
      b.stacked(p + "experts.down_proj", p + "experts.down_proj", E, H, I);
      break;
    case ExpertLayout::mlx_switch:
      for (const char* proj : {"gate_proj", "up_proj"}) {
        const std::string mod = p + "switch_mlp." + proj;
        b.stacked(mod + ".weight", mod, E, I, H);
      }
      b.stacked(p + "switch_mlp.down_proj.weight", p + "switch_mlp.down_proj", E, H, I);
      break;
  }
  if (m.shared_intermediate_size > 0) {
    const int64_t S = m.shared_intermediate_size;
    b.linear(p + "shared_expert.gate_proj", S, H);
    b.linear(p + "shared_expert.up_proj", S, H);
    b.linear(p + "shared_expert.down_proj", H, S);
    if (m.shared_expert_gate) b.linear(p + "shared_expert_gate", 1, H);
  }
}

void add_dense_mlp(TableBuilder& b, const Config& c, const std::string& p) {
  const int64_t H = c.hidden_size, I = c.intermediate_size;
  b.linear(p + "gate_proj", I, H);
  b.linear(p + "up_proj", I, H);
  b.linear(p + "down_proj", H, I);
}

}  // namespace

void build_qwen(const Config& c, const WeightLayout& layout, std::vector<TensorSpec>& out) {
  TableBuilder b(c, out);
  const std::string& P = layout.prefix;
  const int64_t H = c.hidden_size;
  b.linear(P + "embed_tokens", c.vocab_size, H);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = P + "layers." + std::to_string(i) + ".";
    const LayerSpec& spec = c.layers[static_cast<size_t>(i)];
    b.plain(l + "input_layernorm.weight", {H});
    switch (spec.mixer) {
      case Mixer::gdn:
        add_gdn(b, c, layout, l + "linear_attn.");
        break;
      case Mixer::attention:
        add_attention(b, c, l + "self_attn.");
        break;
      default:
        fail("[model] ", c.path, ": layer ", i, " of a ", arch_name(c.arch),
             " model must be linear_attention or full_attention");
    }
    b.plain(l + "post_attention_layernorm.weight", {H});
    if (spec.ffn == Ffn::moe) {
      add_moe(b, c, layout, l + "mlp.");
    } else {
      add_dense_mlp(b, c, l + "mlp.");
    }
  }
  b.plain(P + "norm.weight", {H});
  if (!c.tie_word_embeddings) b.linear(layout.lm_head, c.vocab_size, H);
}

}  // namespace hybrid::model_detail
