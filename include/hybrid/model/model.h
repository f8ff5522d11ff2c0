// The model layer's weight table: for a Config, every tensor the forward pass reads (Hugging Face
// names, expected shapes, allowed dtypes), the sizes derived from it, and the check of a
// Checkpoint against it.
//
//   Config cfg = load_config(dir);
//   Checkpoint ckpt(dir);
//   ModelSpec spec = describe_model(cfg, detect_layout(cfg, ckpt));
//   check_weights(spec, ckpt);  // throws: "[model] <name>: expected [2048, 512] bf16|f16|f32, got
//   ..."
//
// One builder per architecture family: src/model/qwen3_next.cpp (qwen3_next, qwen3_5,
// qwen3_5_moe), src/model/mamba2.cpp, src/model/nemotron_h.cpp.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "hybrid/core/dtype.h"
#include "hybrid/model/config.h"

namespace hybrid {

class Checkpoint;

struct TensorSpec {
  std::string name;            // as stored, e.g. "model.layers.0.linear_attn.in_proj_qkvz.weight"
  std::vector<int64_t> shape;  // as stored (MLX-packed weights: [.., out, in · bits / 32])
  std::vector<DType> dtypes;   // allowed; the first is what the published weights use
  int64_t params = 0;          // logical parameters it carries (scales / biases of MLX: 0)
  // MLX affine quantization of this weight (0 = not quantized); its scales and biases follow it.
  int64_t bits = 0;
  int64_t group_size = 0;
};

// How a checkpoint names and lays out its tensors (read from the config, or from the checkpoint).
enum class ExpertLayout {
  per_expert,  // mlp.experts.<e>.{gate,up,down}_proj.weight (Qwen3-Next, Nemotron-H as published)
  fused,       // mlp.experts.gate_up_proj [E, 2I, H], mlp.experts.down_proj [E, H, I] (Qwen3.5)
  mlx_switch,  // mlp.switch_mlp.{gate,up,down}_proj.weight [E, out, in] (mlx-lm)
};

struct WeightLayout {
  std::string prefix;               // "model.", "model.language_model.", "backbone."
  std::string lm_head = "lm_head";  // module path of the output projection
  ExpertLayout experts = ExpertLayout::per_expert;
  bool conv_channels_last = false;  // MLX stores depthwise conv weights [C, W, 1], HF [C, 1, W]
};

struct ModelSpec {
  Config config;
  WeightLayout layout;
  std::vector<TensorSpec> tensors;

  const TensorSpec* find(const std::string& name) const;
  int64_t parameters() const;  // Σ logical parameters (tied lm_head counted once)

  // Per-sequence recurrent state in f32: GDN layers · Hv · V · K · 4, Mamba layers · H · P · N · 4.
  int64_t ssm_state_bytes() const;
  // Per-sequence convolution state in f32: layers · conv_dim · (W - 1) · 4.
  int64_t conv_state_bytes() const;
  int64_t state_bytes() const { return ssm_state_bytes() + conv_state_bytes(); }
  // KV cache per token: attention layers · 2 · Hkv · D · kv_dtype_bytes.
  int64_t kv_bytes_per_token(int64_t kv_dtype_bytes = 2) const;
  // Bytes of the weights by dtype, each tensor in its first allowed dtype.
  std::map<DType, int64_t> weight_bytes() const;
  int64_t total_weight_bytes() const;
};

// The layout a checkpoint of this config has when written by transformers (or, for a config with
// an MLX "quantization" entry, by mlx-lm).
WeightLayout default_layout(const Config& cfg);
// The layout of a checkpoint on disk: its name prefix (model. / model.language_model. /
// backbone. / language_model.model.), expert storage and conv weight order.
WeightLayout detect_layout(const Config& cfg, const Checkpoint& ckpt);

ModelSpec describe_model(const Config& cfg, const WeightLayout& layout);
inline ModelSpec describe_model(const Config& cfg) {
  return describe_model(cfg, default_layout(cfg));
}

// Every problem of `ckpt` against `spec`: a missing tensor or a tensor of the wrong shape or dtype,
// one line each, in table order. Tensors the model does not need (mtp.*, visual) are ignored.
std::vector<std::string> weight_problems(const ModelSpec& spec, const Checkpoint& ckpt);
// Throws hybrid::Error with the first problem (and how many more there are).
void check_weights(const ModelSpec& spec, const Checkpoint& ckpt);
// Bytes of the spec's tensors as stored in the checkpoint, by dtype.
std::map<DType, int64_t> checkpoint_weight_bytes(const ModelSpec& spec, const Checkpoint& ckpt);
// The bytes the engine's load keeps of those weights, per dtype: as stored, except MLX-quantized
// weights, which are dequantized at load into their scales' dtype (their codes, scales and biases
// are not kept) unless `kept_quantized(name)` says the load keeps that weight quantized.
std::map<DType, int64_t> loaded_weight_bytes(
    const ModelSpec& spec, const Checkpoint& ckpt,
    const std::function<bool(const std::string&)>& kept_quantized = {});
// Whether the engine can keep weight `name` quantized on the device: MLX-quantized routed
// experts (`.switch_mlp.`), which run through moe_experts_q.
bool is_routed_experts_weight(const std::string& name);
// The weights' bytes, totals over dtypes: as stored in the checkpoint, as the load keeps them
// with every MLX-quantized weight dequantized, and with the routed experts kept quantized (equal
// to `loaded` when the checkpoint has no MLX-quantized routed experts).
struct WeightMemory {
  int64_t stored = 0, loaded = 0, experts_kept = 0;
};
WeightMemory weight_memory(const ModelSpec& spec, const Checkpoint& ckpt);

// "[2048, 512]"
std::string shape_str(const std::vector<int64_t>& shape);
// "2.50 GiB", "96.0 KiB", "24.0 KiB"
std::string format_bytes(int64_t bytes);

}  // namespace hybrid
