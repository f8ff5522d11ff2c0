// config.json -> Config: every hyper-parameter the forward pass of a supported architecture needs,
// with transformers' defaults where a field is absent.
//
// Supported model_type values (a multimodal config whose text model sits under "text_config" is
// read from there; the outer model_type names the family):
//   qwen3_next                 Qwen3-Next (GDN + gated attention, MoE)          Qwen3NextConfig
//   qwen3_5, qwen3_5_text      Qwen3.5 dense (GDN + gated attention, SwiGLU)    Qwen3_5TextConfig
//   qwen3_5_moe, ..._moe_text  Qwen3.5 MoE Qwen3_5MoeTextConfig mamba2                     Mamba-2
//   (every layer a Mamba-2 mixer)            Mamba2Config nemotron_h                 Nemotron-H
//   (Mamba-2 / attention / MLP / MoE)     NemotronHConfig
// An unknown model_type, a missing required field, a field of the wrong JSON type or a value out
// of range is a hybrid::Error naming the field and the file.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace hybrid {

enum class Arch { qwen3_next, qwen3_5, qwen3_5_moe, mamba2, nemotron_h };
std::string_view arch_name(Arch a);

// What mixes tokens in a layer, and what follows it. Qwen layers have both (mixer, then FFN);
// Mamba2 layers have only a mixer; each Nemotron-H layer is exactly one of the four blocks.
enum class Mixer { none, gdn, attention, mamba };
enum class Ffn { none, dense, moe };

struct LayerSpec {
  Mixer mixer = Mixer::none;
  Ffn ffn = Ffn::none;
};

// Softmax attention (Qwen: gated attention with q_norm/k_norm and partial RoPE; Nemotron-H: plain
// GQA without positional encoding).
struct AttentionConfig {
  int64_t num_heads = 0;     // query heads Hq
  int64_t num_kv_heads = 0;  // Hkv (Hq % Hkv == 0)
  int64_t head_dim = 0;      // D
  bool output_gate = false;  // Qwen: q_proj emits [q_h | gate_h] per head; out *= sigmoid(gate)
  bool qk_norm = false;      // Qwen: zero-centred RMSNorm over D on q and k before RoPE
  bool bias = false;         // attention_bias: q/k/v/o projections carry a bias
  // RoPE (NeoX rotate_half over the first rotary_dim dims). rotary_dim == 0: no RoPE (Nemotron-H).
  double rope_theta = 0;
  double partial_rotary_factor = 1.0;
  int64_t rotary_dim = 0;  // head_dim · partial_rotary_factor (even)
  std::string rope_type;   // "default" (others: rope_scaling / rope_parameters "rope_type")
  std::vector<int64_t> mrope_section;  // Qwen3.5 interleaved M-RoPE; text-only = 1-D RoPE
};

// Gated DeltaNet (Qwen3-Next / Qwen3.5 linear_attention layers).
struct GdnConfig {
  int64_t num_k_heads = 0;  // Hk (linear_num_key_heads)
  int64_t num_v_heads = 0;  // Hv (linear_num_value_heads, Hv % Hk == 0)
  int64_t k_head_dim = 0;   // K
  int64_t v_head_dim = 0;   // V
  int64_t conv_kernel = 0;  // W (linear_conv_kernel_dim)
  int64_t key_dim() const { return num_k_heads * k_head_dim; }
  int64_t value_dim() const { return num_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // [Q | K | V] channels
};

// Mamba-2 mixer (Mamba2 and Nemotron-H "M" layers).
struct MambaConfig {
  int64_t num_heads = 0;      // H
  int64_t head_dim = 0;       // P
  int64_t state_size = 0;     // N
  int64_t n_groups = 0;       // G (B/C groups; H % G == 0)
  int64_t conv_kernel = 0;    // W
  int64_t chunk_size = 0;     // SSD chunk Q
  bool in_proj_bias = false;  // use_bias
  bool conv_bias = true;      // use_conv_bias / mamba_conv_bias
  double dt_min = 0.0;        // time_step_limit (clamp of softplus(dt + dt_bias))
  double dt_max = 0.0;        // +inf when unlimited
  int64_t d_inner() const { return num_heads * head_dim; }
  int64_t conv_dim() const { return d_inner() + 2 * n_groups * state_size; }  // [x | B | C]
  int64_t in_proj_dim() const { return 2 * d_inner() + 2 * n_groups * state_size + num_heads; }
  // The gated RMSNorm normalises groups of d_inner / G channels (mamba_ssm, Nemotron-H).
  int64_t norm_group_size() const { return d_inner() / n_groups; }
};

struct MoeConfig {
  int64_t num_experts = 0;               // E
  int64_t top_k = 0;                     // experts per token
  int64_t intermediate_size = 0;         // I of one routed expert
  int64_t shared_intermediate_size = 0;  // 0: no shared expert
  bool norm_topk_prob = true;            // renormalise the top-k weights to sum 1
  // Qwen: softmax over all E; shared expert scaled by sigmoid(shared_expert_gate(x)).
  // Nemotron-H: sigmoid scores + e_score_correction_bias for selection, routed_scaling_factor.
  bool sigmoid_router = false;
  bool shared_expert_gate = false;
  double routed_scaling_factor = 1.0;
  int64_t n_group = 1, topk_group = 1;  // Nemotron-H grouped top-k
};

// MLX affine quantization of Linear / Embedding weights ("quantization" in config.json).
struct QuantParams {
  int64_t group_size = 64;
  int64_t bits = 4;
  bool operator==(const QuantParams&) const = default;
};

struct QuantConfig {
  QuantParams defaults;
  std::string mode = "affine";
  // Per-module entries keyed by module path (e.g. "model.layers.0.mlp.gate"): a QuantParams, or
  // nullopt when the module is stored unquantized (MLX writes `"path": false`).
  std::map<std::string, std::optional<QuantParams>> overrides;
  // The parameters of the module at `path` (defaults unless overridden); nullopt = unquantized.
  std::optional<QuantParams> for_module(const std::string& path) const;
};

struct Config {
  std::string path;        // the config.json read (for messages)
  std::string model_type;  // as written (outer model_type for multimodal configs)
  Arch arch = Arch::qwen3_next;
  bool nested_text_config = false;  // the text model came from "text_config"

  int64_t hidden_size = 0;
  int64_t num_layers = 0;
  int64_t vocab_size = 0;
  int64_t max_position_embeddings = 0;
  double norm_eps = 0;  // rms_norm_eps / layer_norm_epsilon
  bool tie_word_embeddings = false;
  std::string dtype = "bfloat16";   // torch_dtype / dtype of the published weights
  bool zero_centered_norm = false;  // Qwen: y = x̂ · (1 + w)

  std::string hidden_act = "silu";  // FFN activation (Nemotron-H: mlp_hidden_act, "relu2")
  int64_t intermediate_size = 0;    // dense FFN width (Qwen dense layers, Nemotron-H "-")
  bool mlp_bias = false;

  AttentionConfig attention;
  GdnConfig gdn;
  MambaConfig mamba;
  MoeConfig moe;
  std::vector<LayerSpec> layers;  // num_layers entries

  std::optional<QuantConfig> quantization;

  int64_t count(Mixer m) const;
  int64_t count(Ffn f) const;
  // One character per layer: G = GDN, A = attention, M = Mamba, then for FFN-only layers
  // (Nemotron-H)
  // '-' = MLP, 'E' = MoE. Qwen layers print their mixer only (every layer has an FFN).
  std::string layer_pattern() const;
};

// Reads `<dir>/config.json` (or the file itself when `path` names a file).
Config load_config(const std::string& path);
// Parses JSON text; `source` names it in messages.
Config parse_config(const std::string& json_text, const std::string& source);

}  // namespace hybrid
