// config.json -> Config. Defaults are transformers' (configuration_qwen3_next.py,
// configuration_qwen3_5.py, configuration_qwen3_5_moe.py, configuration_mamba2.py,
// configuration_nemotron_h.py); docs/MODELS.md lists every field read.
#include "hybrid/model/config.h"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "hybrid/core/error.h"
#include "model/json_text.h"

namespace hybrid {

namespace {

using json = nlohmann::json;
constexpr double kInf = std::numeric_limits<double>::infinity();

std::string json_type(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// Typed access to one JSON object; every error names the field and the file.
class Fields {
 public:
  Fields(const json& j, std::string source, std::string prefix = "")
      : j_(j), source_(std::move(source)), prefix_(std::move(prefix)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& raw(const char* key) const { return j_.at(key); }

  [[noreturn]] void bad(const std::string& key, const std::string& what) const {
    fail("[config] ", source_, ": ", prefix_, key, ": ", what);
  }

  int64_t integer(const char* key) const {
    if (!has(key)) fail("[config] ", source_, ": missing required field '", prefix_, key, "'");
    return to_int(key, j_.at(key));
  }
  int64_t integer(const char* key, int64_t def) const { return has(key) ? integer(key) : def; }
  // First present key of several spellings (e.g. n_groups | mamba_n_groups), else the default.
  int64_t integer(std::initializer_list<const char*> keys, int64_t def) const {
    for (const char* k : keys)
      if (has(k)) return integer(k);
    return def;
  }
  int64_t positive(const char* key) const {
    int64_t v = integer(key);
    if (v <= 0) bad(key, str("must be positive, got ", v));
    return v;
  }
  int64_t positive(std::initializer_list<const char*> keys, int64_t def) const {
    for (const char* k : keys)
      if (has(k)) {
        int64_t v = integer(k);
        if (v <= 0) bad(k, str("must be positive, got ", v));
        return v;
      }
    return def;
  }

  double number(const char* key, double def) const {
    if (!has(key)) return def;
    return to_double(key, j_.at(key));
  }
  double to_double(const std::string& key, const json& v) const {
    if (v.is_number()) return v.get<double>();
    // transformers 5 writes non-finite floats as {"__float__": "Infinity"}.
    const json& s_v = v.is_object() && v.contains("__float__") ? v.at("__float__") : v;
    if (s_v.is_string()) {
      const std::string s = s_v.get<std::string>();
      if (s == "Infinity") return kInf;
      if (s == "-Infinity") return -kInf;
    }
    bad(key, "must be a number, got " + json_type(v));
  }
  bool boolean(const char* key, bool def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_boolean()) bad(key, "must be a boolean, got " + json_type(v));
    return v.get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    if (!has(key)) return def;
    const json& v = j_.at(key);
    if (!v.is_string()) bad(key, "must be a string, got " + json_type(v));
    return v.get<std::string>();
  }
  std::vector<int64_t> int_list(const char* key) const {
    std::vector<int64_t> out;
    if (!has(key)) return out;
    const json& v = j_.at(key);
    if (!v.is_array()) bad(key, "must be an array, got " + json_type(v));
    for (const json& e : v) out.push_back(to_int(key, e));
    return out;
  }
  std::vector<std::string> string_list(const char* key) const {
    std::vector<std::string> out;
    const json& v = j_.at(key);
    if (!v.is_array()) bad(key, "must be an array, got " + json_type(v));
    for (const json& e : v) {
      if (!e.is_string()) bad(key, "must be an array of strings, has " + json_type(e));
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  const std::string& source() const { return source_; }

 private:
  int64_t to_int(const std::string& key, const json& v) const {
    if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
    // 2.0 written for 2 (Python float) is accepted when it is integral.
    if (v.is_number_float()) {
      double d = v.get<double>();
      if (std::floor(d) == d && std::abs(d) < 9e15) return static_cast<int64_t>(d);
    }
    bad(key, "must be an integer, got " + (v.is_number() ? v.dump() : json_type(v)));
  }

  const json& j_;
  std::string source_;
  std::string prefix_;
};

// ---- RoPE: top-level rope_theta / partial_rotary_factor / rope_scaling (transformers 4 and the
// published checkpoints) and transformers 5's rope_parameters dict, which wins when both exist.
void read_rope(const json& j, const Fields& f, AttentionConfig& a, double default_theta,
               double default_partial) {
  a.rope_theta = f.number("rope_theta", default_theta);
  a.partial_rotary_factor = f.number("partial_rotary_factor", default_partial);
  a.rope_type = "default";
  auto read_dict = [&](const char* key) {
    if (!f.has(key)) return;
    const json* d = &j.at(key);
    if (!d->is_object()) f.bad(key, "must be an object, got " + json_type(*d));
    // rope_parameters may be keyed by layer type ({"full_attention": {...}}).
    if (d->contains("full_attention") && d->at("full_attention").is_object())
      d = &d->at("full_attention");
    Fields r(*d, f.source(), std::string(key) + ".");
    a.rope_theta = r.number("rope_theta", a.rope_theta);
    a.partial_rotary_factor = r.number("partial_rotary_factor", a.partial_rotary_factor);
    a.rope_type = r.string("rope_type", r.string("type", a.rope_type));
    if (r.has("mrope_section")) a.mrope_section = r.int_list("mrope_section");
  };
  read_dict("rope_scaling");
  read_dict("rope_parameters");
  if (!(a.partial_rotary_factor > 0.0 && a.partial_rotary_factor <= 1.0))
    f.bad("partial_rotary_factor", str("must be in (0, 1], got ", a.partial_rotary_factor));
  if (!(a.rope_theta > 0.0)) f.bad("rope_theta", str("must be positive, got ", a.rope_theta));
  a.rotary_dim = static_cast<int64_t>(static_cast<double>(a.head_dim) * a.partial_rotary_factor);
  if (a.rotary_dim % 2 != 0 || a.rotary_dim == 0)
    f.bad("partial_rotary_factor",
          str("head_dim ", a.head_dim, " x ", a.partial_rotary_factor, " = ", a.rotary_dim,
              " rotary dims: must be even and positive"));
  if (a.rope_type != "default" && a.rope_type != "mrope")
    f.bad("rope_type", "'" + a.rope_type + "' is not supported (default, mrope)");
}

void read_quantization(const json& j, const Fields& f, Config& c) {
  const char* key = nullptr;
  if (f.has("quantization")) {
    key = "quantization";
  } else if (f.has("quantization_config")) {
    key = "quantization_config";
  } else {
    return;
  }
  const json& q = j.at(key);
  if (!q.is_object()) f.bad(key, "must be an object, got " + json_type(q));
  Fields qf(q, f.source(), std::string(key) + ".");
  if (qf.has("quant_method"))
    qf.bad("quant_method", "'" + qf.string("quant_method", "") +
                               "' is not supported (MLX affine quantization only)");
  QuantConfig qc;
  qc.defaults.group_size = qf.integer("group_size");
  qc.defaults.bits = qf.integer("bits");
  qc.mode = qf.string("mode", "affine");
  if (qc.mode != "affine") qf.bad("mode", "'" + qc.mode + "' is not supported (affine only)");
  auto check = [&](const std::string& where, const QuantParams& p) {
    if (p.group_size != 32 && p.group_size != 64 && p.group_size != 128)
      qf.bad(where + "group_size", str("must be 32, 64 or 128, got ", p.group_size));
    if (p.bits != 2 && p.bits != 3 && p.bits != 4 && p.bits != 5 && p.bits != 6 && p.bits != 8)
      qf.bad(where + "bits", str("must be 2, 3, 4, 5, 6 or 8, got ", p.bits));
  };
  check("", qc.defaults);
  for (auto it = q.begin(); it != q.end(); ++it) {
    const std::string& k = it.key();
    if (k == "group_size" || k == "bits" || k == "mode") continue;
    const json& v = it.value();
    if (v.is_boolean()) {
      // false: stored unquantized; true: the defaults.
      qc.overrides[k] = v.get<bool>() ? std::optional<QuantParams>(qc.defaults) : std::nullopt;
    } else if (v.is_object()) {
      Fields m(v, f.source(), std::string(key) + "." + k + ".");
      QuantParams p;
      p.group_size = m.integer("group_size", qc.defaults.group_size);
      p.bits = m.integer("bits", qc.defaults.bits);
      std::string mode = m.string("mode", qc.mode);
      if (mode != "affine") m.bad("mode", "'" + mode + "' is not supported (affine only)");
      check(k + ".", p);
      qc.overrides[k] = p;
    } else {
      qf.bad(k, "must be a boolean or an object, got " + json_type(v));
    }
  }
  c.quantization = std::move(qc);
}

void check_divides(const Fields& f, const char* what, int64_t a, const char* by, int64_t b) {
  if (b <= 0 || a % b != 0) f.bad(what, str(a, " is not a multiple of ", by, " = ", b));
}

// ---- Qwen3-Next / Qwen3.5 ----------------------------------------------------------------------
struct QwenDefaults {
  int64_t hidden, intermediate, layers, heads, kv_heads, vocab, max_pos;
  int64_t v_heads;
  int64_t experts, top_k, moe_i, shared_i;
  double theta;
};

void read_qwen(const json& j, const Fields& f, Config& c) {
  // Defaults: Qwen3NextConfig() = Qwen3-Next-80B-A3B; Qwen3_5TextConfig() = Qwen3.5-9B;
  // Qwen3_5MoeTextConfig() = Qwen3.5-35B-A3B.
  QwenDefaults d{};
  switch (c.arch) {
    case Arch::qwen3_next:
      d = {2048, 5632, 48, 16, 2, 151936, 32768, 32, 512, 10, 512, 512, 10000.0};
      break;
    case Arch::qwen3_5:
      d = {4096, 12288, 32, 16, 2, 248320, 32768, 32, 0, 0, 0, 0, 10000000.0};
      break;
    default:
      d = {2048, 0, 40, 16, 2, 248320, 32768, 32, 256, 8, 512, 512, 10000000.0};
      break;
  }
  c.hidden_size = f.positive("hidden_size");
  c.num_layers = f.positive("num_hidden_layers");
  c.vocab_size = f.positive("vocab_size");
  c.max_position_embeddings = f.integer("max_position_embeddings", d.max_pos);
  c.norm_eps = f.number("rms_norm_eps", 1e-6);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.zero_centered_norm = true;
  c.hidden_act = f.string("hidden_act", "silu");
  c.intermediate_size = f.integer("intermediate_size", d.intermediate);

  AttentionConfig& a = c.attention;
  a.num_heads = f.positive({"num_attention_heads"}, d.heads);
  a.num_kv_heads = f.positive({"num_key_value_heads"}, d.kv_heads);
  a.head_dim = f.positive({"head_dim"}, 256);
  a.output_gate = true;
  a.qk_norm = true;
  a.bias = f.boolean("attention_bias", false);
  check_divides(f, "num_attention_heads", a.num_heads, "num_key_value_heads", a.num_kv_heads);
  read_rope(j, f, a, d.theta, 0.25);

  GdnConfig& g = c.gdn;
  g.num_k_heads = f.positive({"linear_num_key_heads"}, 16);
  g.num_v_heads = f.positive({"linear_num_value_heads"}, d.v_heads);
  g.k_head_dim = f.positive({"linear_key_head_dim"}, 128);
  g.v_head_dim = f.positive({"linear_value_head_dim"}, 128);
  g.conv_kernel = f.positive({"linear_conv_kernel_dim"}, 4);
  check_divides(f, "linear_num_value_heads", g.num_v_heads, "linear_num_key_heads", g.num_k_heads);

  const bool has_moe = c.arch != Arch::qwen3_5;
  if (has_moe) {
    MoeConfig& m = c.moe;
    m.num_experts = f.integer("num_experts", d.experts);
    m.top_k = f.integer("num_experts_per_tok", d.top_k);
    m.intermediate_size = f.integer("moe_intermediate_size", d.moe_i);
    m.shared_intermediate_size = f.integer("shared_expert_intermediate_size", d.shared_i);
    m.norm_topk_prob = f.boolean("norm_topk_prob", true);
    m.shared_expert_gate = m.shared_intermediate_size > 0;
    if (m.num_experts < 0) f.bad("num_experts", str("must be >= 0, got ", m.num_experts));
    if (m.num_experts > 0 && (m.top_k <= 0 || m.top_k > m.num_experts))
      f.bad("num_experts_per_tok",
            str("must be in [1, num_experts=", m.num_experts, "], got ", m.top_k));
    if (m.num_experts > 0 && m.intermediate_size <= 0)
      f.bad("moe_intermediate_size", str("must be positive, got ", m.intermediate_size));
  }

  // Mixer per layer: layer_types, else every full_attention_interval-th layer is attention.
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{});
  if (f.has("layer_types")) {
    std::vector<std::string> types = f.string_list("layer_types");
    if (static_cast<int64_t>(types.size()) != c.num_layers)
      f.bad("layer_types",
            str("has ", types.size(), " entries, num_hidden_layers is ", c.num_layers));
    for (size_t i = 0; i < types.size(); ++i) {
      if (types[i] == "linear_attention") {
        c.layers[i].mixer = Mixer::gdn;
      } else if (types[i] == "full_attention") {
        c.layers[i].mixer = Mixer::attention;
      } else {
        f.bad("layer_types", str("entry ", i, " is '", types[i],
                                 "' (expected linear_attention or full_attention)"));
      }
    }
  } else {
    int64_t interval = f.positive({"full_attention_interval"}, 4);
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layers[static_cast<size_t>(i)].mixer =
          (i + 1) % interval == 0 ? Mixer::attention : Mixer::gdn;
  }
  // FFN per layer: MoE unless listed in mlp_only_layers or off the decoder_sparse_step grid.
  std::vector<int64_t> mlp_only = f.int_list("mlp_only_layers");
  std::set<int64_t> dense(mlp_only.begin(), mlp_only.end());
  int64_t step = has_moe ? f.positive({"decoder_sparse_step"}, 1) : 1;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    bool moe = has_moe && c.moe.num_experts > 0 && !dense.count(i) && (i + 1) % step == 0;
    c.layers[static_cast<size_t>(i)].ffn = moe ? Ffn::moe : Ffn::dense;
  }
  if (c.count(Ffn::dense) > 0 && c.intermediate_size <= 0)
    f.bad("intermediate_size", str("must be positive for dense layers, got ", c.intermediate_size));
}

// ---- Mamba2 ------------------------------------------------------------------------------------
void read_time_step_limit(const json& j, const Fields& f, MambaConfig& m) {
  m.dt_min = 0.0;
  m.dt_max = kInf;
  if (!f.has("time_step_limit")) return;
  const json& v = j.at("time_step_limit");
  if (!v.is_array() || v.size() != 2)
    f.bad("time_step_limit", "must be a pair [min, max], got " + v.dump());
  m.dt_min = f.to_double("time_step_limit", v[0]);
  m.dt_max = f.to_double("time_step_limit", v[1]);
  if (!(m.dt_min <= m.dt_max)) f.bad("time_step_limit", "min must not exceed max: " + v.dump());
}

void check_mamba(const Fields& f, const MambaConfig& m) {
  check_divides(f, "num_heads", m.num_heads, "n_groups", m.n_groups);
}

void read_mamba2(const json& j, const Fields& f, Config& c) {
  c.hidden_size = f.positive("hidden_size");
  c.num_layers = f.positive("num_hidden_layers");
  c.vocab_size = f.positive("vocab_size");
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.max_position_embeddings = 0;
  MambaConfig& m = c.mamba;
  m.num_heads = f.positive({"num_heads"}, 128);
  m.head_dim = f.positive({"head_dim"}, 64);
  m.state_size = f.positive({"state_size"}, 128);
  m.n_groups = f.positive({"n_groups"}, 8);
  m.conv_kernel = f.positive({"conv_kernel"}, 4);
  m.chunk_size = f.positive({"chunk_size"}, 256);
  m.in_proj_bias = f.boolean("use_bias", false);
  m.conv_bias = f.boolean("use_conv_bias", true);
  read_time_step_limit(j, f, m);
  check_mamba(f, m);
  // transformers sizes in_proj from expand · hidden_size; the heads must tile it exactly.
  double expand = f.number("expand", 2.0);
  int64_t d_inner = static_cast<int64_t>(expand * static_cast<double>(c.hidden_size));
  if (d_inner != m.d_inner())
    f.bad("num_heads", str("num_heads x head_dim = ", m.num_heads, " x ", m.head_dim, " = ",
                           m.d_inner(), " but expand x hidden_size = ", d_inner));
  if (!f.boolean("rms_norm", true))
    f.bad("rms_norm", "false is not supported (the gated RMSNorm is part of every mixer)");
  c.layers.assign(static_cast<size_t>(c.num_layers), LayerSpec{Mixer::mamba, Ffn::none});
}

// ---- Nemotron-H --------------------------------------------------------------------------------
void read_nemotron_h(const json& j, const Fields& f, Config& c) {
  c.hidden_size = f.positive("hidden_size");
  c.num_layers = f.positive("num_hidden_layers");
  c.vocab_size = f.positive("vocab_size");
  c.max_position_embeddings = f.integer("max_position_embeddings", 4096);
  c.norm_eps = f.number("layer_norm_epsilon", 1e-5);
  c.tie_word_embeddings = f.boolean("tie_word_embeddings", false);
  c.hidden_act = f.string("mlp_hidden_act", "relu2");
  c.intermediate_size = f.integer("intermediate_size", 21504);
  c.mlp_bias = f.boolean("mlp_bias", false);

  AttentionConfig& a = c.attention;
  a.num_heads = f.positive({"num_attention_heads"}, 32);
  a.num_kv_heads = f.positive({"num_key_value_heads"}, 8);
  a.head_dim = f.positive({"head_dim", "attention_head_dim"}, c.hidden_size / a.num_heads);
  a.bias = f.boolean("attention_bias", false);
  a.rotary_dim = 0;  // Nemotron-H attention has no positional encoding
  a.rope_type = "none";
  check_divides(f, "num_attention_heads", a.num_heads, "num_key_value_heads", a.num_kv_heads);

  MambaConfig& m = c.mamba;
  m.num_heads = f.positive({"mamba_num_heads"}, 128);
  m.head_dim = f.positive({"mamba_head_dim"}, 64);
  m.state_size = f.positive({"ssm_state_size"}, 128);
  m.n_groups = f.positive({"n_groups", "mamba_n_groups"}, 8);
  m.conv_kernel = f.positive({"conv_kernel", "mamba_d_conv"}, 4);
  m.chunk_size = f.positive({"chunk_size", "mamba_chunk_size"}, 128);
  m.in_proj_bias = f.boolean("use_bias", f.boolean("mamba_proj_bias", false));
  m.conv_bias = f.boolean("use_conv_bias", f.boolean("mamba_conv_bias", true));
  read_time_step_limit(j, f, m);
  check_mamba(f, m);

  MoeConfig& e = c.moe;
  e.num_experts = f.integer("n_routed_experts", 8);
  e.top_k = f.integer("num_experts_per_tok", 2);
  e.intermediate_size = f.integer("moe_intermediate_size", 7688);
  int64_t n_shared = f.integer("n_shared_experts", 1);
  e.shared_intermediate_size =
      n_shared > 0 ? n_shared * f.integer("moe_shared_expert_intermediate_size", 7688) : 0;
  e.norm_topk_prob = f.boolean("norm_topk_prob", true);
  e.sigmoid_router = true;
  e.routed_scaling_factor = f.number("routed_scaling_factor", 1.0);
  e.n_group = f.integer("n_group", 1);
  e.topk_group = f.integer("topk_group", 1);

  // Layer pattern: hybrid_override_pattern (M * - E), or the newer layers_block_type list.
  c.layers.clear();
  const char* key = nullptr;
  if (f.has("hybrid_override_pattern")) {
    key = "hybrid_override_pattern";
    std::string p = f.string(key, "");
    for (size_t i = 0; i < p.size(); ++i) {
      switch (p[i]) {
        case 'M':
          c.layers.push_back({Mixer::mamba, Ffn::none});
          break;
        case '*':
          c.layers.push_back({Mixer::attention, Ffn::none});
          break;
        case '-':
          c.layers.push_back({Mixer::none, Ffn::dense});
          break;
        case 'E':
          c.layers.push_back({Mixer::none, Ffn::moe});
          break;
        default:
          f.bad(key, str("character ", i, " is '", p[i],
                         "' (expected M = Mamba, * = attention, - = MLP, E = MoE)"));
      }
    }
  } else if (f.has("layers_block_type")) {
    key = "layers_block_type";
    std::vector<std::string> types = f.string_list(key);
    for (size_t i = 0; i < types.size(); ++i) {
      const std::string& t = types[i];
      // transformers 5 writes the mixers as linear_attention / full_attention.
      if (t == "mamba" || t == "linear_attention") {
        c.layers.push_back({Mixer::mamba, Ffn::none});
      } else if (t == "attention" || t == "full_attention") {
        c.layers.push_back({Mixer::attention, Ffn::none});
      } else if (t == "mlp") {
        c.layers.push_back({Mixer::none, Ffn::dense});
      } else if (t == "moe") {
        c.layers.push_back({Mixer::none, Ffn::moe});
      } else {
        f.bad(key,
              str("entry ", i, " is '", t,
                  "' (expected mamba | linear_attention, attention | full_attention, mlp or moe)"));
      }
    }
  } else {
    fail("[config] ", f.source(),
         ": missing required field 'hybrid_override_pattern' (or 'layers_block_type')");
  }
  if (static_cast<int64_t>(c.layers.size()) != c.num_layers)
    f.bad(key, str("describes ", c.layers.size(), " layers, num_hidden_layers is ", c.num_layers));
  if (c.count(Ffn::dense) > 0 && c.intermediate_size <= 0)
    f.bad("intermediate_size", str("must be positive, got ", c.intermediate_size));
  if (c.count(Ffn::moe) > 0) {
    if (e.num_experts <= 0) f.bad("n_routed_experts", str("must be positive, got ", e.num_experts));
    if (e.top_k <= 0 || e.top_k > e.num_experts)
      f.bad("num_experts_per_tok",
            str("must be in [1, n_routed_experts=", e.num_experts, "], got ", e.top_k));
  }
}

std::optional<Arch> arch_of(const std::string& model_type) {
  if (model_type == "qwen3_next") return Arch::qwen3_next;
  if (model_type == "qwen3_5" || model_type == "qwen3_5_text") return Arch::qwen3_5;
  if (model_type == "qwen3_5_moe" || model_type == "qwen3_5_moe_text") return Arch::qwen3_5_moe;
  if (model_type == "mamba2") return Arch::mamba2;
  if (model_type == "nemotron_h") return Arch::nemotron_h;
  return std::nullopt;
}

}  // namespace

// src/model/json_text.h
std::string quote_nonfinite(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      out += c;
      continue;
    }
    bool replaced = false;
    for (const char* token : {"-Infinity", "Infinity", "NaN"}) {
      size_t n = std::char_traits<char>::length(token);
      if (text.compare(i, n, token) == 0) {
        out += '"';
        out += token;
        out += '"';
        i += n - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

std::string_view arch_name(Arch a) {
  switch (a) {
    case Arch::qwen3_next:
      return "qwen3_next";
    case Arch::qwen3_5:
      return "qwen3_5";
    case Arch::qwen3_5_moe:
      return "qwen3_5_moe";
    case Arch::mamba2:
      return "mamba2";
    case Arch::nemotron_h:
      return "nemotron_h";
  }
  return "?";
}

std::optional<QuantParams> QuantConfig::for_module(const std::string& path) const {
  auto it = overrides.find(path);
  if (it != overrides.end()) return it->second;
  return defaults;
}

int64_t Config::count(Mixer m) const {
  int64_t n = 0;
  for (const LayerSpec& l : layers) n += l.mixer == m;
  return n;
}

int64_t Config::count(Ffn f) const {
  int64_t n = 0;
  for (const LayerSpec& l : layers) n += l.ffn == f;
  return n;
}

std::string Config::layer_pattern() const {
  std::string s;
  for (const LayerSpec& l : layers) {
    switch (l.mixer) {
      case Mixer::gdn:
        s += 'G';
        break;
      case Mixer::attention:
        s += 'A';
        break;
      case Mixer::mamba:
        s += 'M';
        break;
      case Mixer::none:
        s += l.ffn == Ffn::moe ? 'E' : '-';
        break;
    }
  }
  return s;
}

Config parse_config(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(quote_nonfinite(json_text));
  } catch (const json::exception& e) {
    fail("[config] ", source, ": not valid JSON: ", e.what());
  }
  if (!root.is_object())
    fail("[config] ", source, ": expected a JSON object, got ", json_type(root));
  Fields top(root, source);
  if (!top.has("model_type")) fail("[config] ", source, ": missing required field 'model_type'");
  Config c;
  c.path = source;
  c.model_type = top.string("model_type", "");
  std::optional<Arch> arch = arch_of(c.model_type);
  if (!arch)
    fail("[config] ", source, ": unknown model_type '", c.model_type,
         "' (supported: qwen3_next, qwen3_5, qwen3_5_moe, mamba2, nemotron_h)");
  c.arch = *arch;

  // Multimodal Qwen3.5 checkpoints: the language model's fields live under text_config.
  const json* text = &root;
  std::string prefix;
  if (root.contains("text_config") && root.at("text_config").is_object()) {
    text = &root.at("text_config");
    prefix = "text_config.";
    c.nested_text_config = true;
    Fields inner(*text, source, prefix);
    if (inner.has("model_type")) {
      std::optional<Arch> inner_arch = arch_of(inner.string("model_type", ""));
      if (!inner_arch)
        inner.bad("model_type", "unknown model_type '" + inner.string("model_type", "") + "'");
      c.arch = *inner_arch;
    }
  }
  Fields f(*text, source, prefix);
  c.dtype = f.string("torch_dtype",
                     f.string("dtype", top.string("torch_dtype", top.string("dtype", "bfloat16"))));
  switch (c.arch) {
    case Arch::qwen3_next:
    case Arch::qwen3_5:
    case Arch::qwen3_5_moe:
      read_qwen(*text, f, c);
      break;
    case Arch::mamba2:
      read_mamba2(*text, f, c);
      break;
    case Arch::nemotron_h:
      read_nemotron_h(*text, f, c);
      break;
  }
  // Qwen3_5Config / Qwen3_5MoeConfig keep tie_word_embeddings at the top level.
  if (c.nested_text_config && !f.has("tie_word_embeddings"))
    c.tie_word_embeddings = top.boolean("tie_word_embeddings", c.tie_word_embeddings);
  // MLX writes "quantization" at the top level, even for multimodal configs.
  read_quantization(root, top, c);
  return c;
}

Config load_config(const std::string& path) {
  namespace fs = std::filesystem;
  fs::path p(path);
  if (!fs::exists(p)) fail("[config] ", path, ": no such file or directory");
  if (fs::is_directory(p)) {
    p /= "config.json";
    if (!fs::exists(p)) fail("[config] ", path, ": not a model folder (no config.json)");
  }
  std::ifstream in(p, std::ios::binary);
  if (!in) fail("[config] ", p.string(), ": cannot be read");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_config(ss.str(), p.string());
}

}  // namespace hybrid
