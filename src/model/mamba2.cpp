// Weight table of Mamba2 (modeling_mamba2.py). Under "backbone.":
//   embeddings.weight [vocab, H]; per layer i: layers.i.norm.weight [H] and the mixer
//   layers.i.mixer.{in_proj.weight [2·d_inner + 2·G·N + Hh, H] (+ bias when use_bias),
//   conv1d.weight [conv_dim, 1, W] (+ conv1d.bias [conv_dim] when use_conv_bias),
//   dt_bias [Hh], A_log [Hh], D [Hh], norm.weight [d_inner], out_proj.weight [H, d_inner]};
//   norm_f.weight [H]; then lm_head.weight [vocab, H] unless tied.
// (d_inner = Hh · P, conv_dim = d_inner + 2·G·N; the in_proj rows are [z | xBC | dt].)
#include <string>

#include "model_impl.h"

namespace hybrid::model_detail {

void add_mamba_mixer(TableBuilder& b, const Config& c, const WeightLayout& layout,
                     const std::string& mixer) {
  const MambaConfig& m = c.mamba;
  const std::string p = mixer + ".";
  b.linear(p + "in_proj", m.in_proj_dim(), c.hidden_size, m.in_proj_bias);
  b.plain(p + "conv1d.weight", conv_weight_shape(layout, m.conv_dim(), m.conv_kernel));
  if (m.conv_bias) b.plain(p + "conv1d.bias", {m.conv_dim()});
  b.plain(p + "dt_bias", {m.num_heads});
  b.plain(p + "A_log", {m.num_heads});
  b.plain(p + "D", {m.num_heads});
  b.plain(p + "norm.weight", {m.d_inner()});
  b.linear(p + "out_proj", c.hidden_size, m.d_inner(), m.in_proj_bias);
}

void build_mamba2(const Config& c, const WeightLayout& layout, std::vector<TensorSpec>& out) {
  TableBuilder b(c, out);
  const std::string& P = layout.prefix;
  b.linear(P + "embeddings", c.vocab_size, c.hidden_size);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string l = P + "layers." + std::to_string(i) + ".";
    b.plain(l + "norm.weight", {c.hidden_size});
    add_mamba_mixer(b, c, layout, l + "mixer");
  }
  b.plain(P + "norm_f.weight", {c.hidden_size});
  if (!c.tie_word_embeddings) b.linear(layout.lm_head, c.vocab_size, c.hidden_size);
}

}  // namespace hybrid::model_detail
