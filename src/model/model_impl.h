// Internal: the helper every architecture's weight table is written with, and the per-family
// builders (src/model/qwen3_next.cpp, mamba2.cpp, nemotron_h.cpp).
#pragma once

#include <string>
#include <vector>

#include "hybrid/model/model.h"

namespace hybrid::model_detail {

// Appends TensorSpecs to a table. Linear / Embedding weights go through `linear` / `stacked`,
// which store them as an MLX triple (weight u32, scales, biases) when the config's quantization
// covers the module and its input width is a multiple of the group size (mlx-lm's rule), and as
// one float tensor otherwise.
class TableBuilder {
 public:
  TableBuilder(const Config& cfg, std::vector<TensorSpec>& out);

  // A float tensor that is never quantized (norm weights, A_log, dt_bias, conv weights, biases).
  void plain(const std::string& name, std::vector<int64_t> shape);
  // nn.Linear / nn.Embedding `module` with weight [out, in]: "<module>.weight" (+ ".bias").
  void linear(const std::string& module, int64_t out, int64_t in, bool bias = false);
  // Stacked expert weights [E, out, in] under `name` (a full tensor name: fused HF tensors have no
  // ".weight" suffix), quantized like `linear` when `quant_module` is covered.
  void stacked(const std::string& name, const std::string& quant_module, int64_t experts,
               int64_t out, int64_t in);

 private:
  void quantized_or_float(const std::string& weight_name, const std::string& base,
                          const std::string& module, std::vector<int64_t> lead, int64_t out,
                          int64_t in);
  const Config& cfg_;
  std::vector<TensorSpec>& out_;
  std::vector<DType> float_dtypes_;
};

// A depthwise conv1d weight [C, 1, W] (HF) or [C, W, 1] (MLX).
std::vector<int64_t> conv_weight_shape(const WeightLayout& layout, int64_t channels, int64_t width);

void build_qwen(const Config& cfg, const WeightLayout& layout, std::vector<TensorSpec>& out);
void build_mamba2(const Config& cfg, const WeightLayout& layout, std::vector<TensorSpec>& out);
void build_nemotron_h(const Config& cfg, const WeightLayout& layout, std::vector<TensorSpec>& out);

// The Mamba-2 mixer's tensors under `mixer` (e.g. "backbone.layers.0.mixer"); shared by Mamba2 and
// Nemotron-H.
void add_mamba_mixer(TableBuilder& b, const Config& cfg, const WeightLayout& layout,
                     const std::string& mixer);

}  // namespace hybrid::model_detail
