// ModelSpec: the table builder shared by the architectures, layouts, sizes and the checkpoint
// check.
#include "hybrid/model/model.h"

#include <algorithm>
#include <cstdio>

#include "hybrid/core/error.h"
#include "hybrid/model/safetensors.h"
#include "model_impl.h"

namespace hybrid {

namespace model_detail {

namespace {

std::vector<DType> float_dtypes(const Config& c) {
  DType first = DType::bf16;
  if (c.dtype == "float16") first = DType::f16;
  if (c.dtype == "float32") first = DType::f32;
  std::vector<DType> out{first};
  for (DType t : {DType::bf16, DType::f16, DType::f32})
    if (t != first) out.push_back(t);
  return out;
}

}  // namespace

TableBuilder::TableBuilder(const Config& cfg, std::vector<TensorSpec>& out)
    : cfg_(cfg), out_(out), float_dtypes_(float_dtypes(cfg)) {}

void TableBuilder::plain(const std::string& name, std::vector<int64_t> shape) {
  TensorSpec t;
  t.name = name;
  t.params = 1;
  for (int64_t d : shape) t.params *= d;
  t.shape = std::move(shape);
  t.dtypes = float_dtypes_;
  out_.push_back(std::move(t));
}

void TableBuilder::linear(const std::string& module, int64_t out, int64_t in, bool bias) {
  quantized_or_float(module + ".weight", module, module, {}, out, in);
  if (bias) plain(module + ".bias", {out});
}

void TableBuilder::stacked(const std::string& name, const std::string& quant_module,
                           int64_t experts, int64_t out, int64_t in) {
  // Scales / biases of a stacked MLX weight sit next to it: "<module>.scales".
  quantized_or_float(name, quant_module, quant_module, {experts}, out, in);
}

void TableBuilder::quantized_or_float(const std::string& weight_name, const std::string& base,
                                      const std::string& module, std::vector<int64_t> lead,
                                      int64_t out, int64_t in) {
  std::optional<QuantParams> q;
  if (cfg_.quantization) q = cfg_.quantization->for_module(module);
  // mlx-lm quantizes a Linear / Embedding only when its input width is a multiple of group_size.
  if (q && in % q->group_size != 0) q.reset();
  int64_t lead_n = 1;
  for (int64_t d : lead) lead_n *= d;
  TensorSpec w;
  w.name = weight_name;
  w.params = lead_n * out * in;
  w.shape = lead;
  w.shape.push_back(out);
  if (!q) {
    w.shape.push_back(in);
    w.dtypes = float_dtypes_;
    out_.push_back(std::move(w));
    return;
  }
  w.shape.push_back(in * q->bits / 32);
  w.dtypes = {DType::u32};
  w.bits = q->bits;
  w.group_size = q->group_size;
  out_.push_back(std::move(w));
  for (const char* part : {".scales", ".biases"}) {
    TensorSpec s;
    s.name = base + part;
    s.shape = lead;
    s.shape.push_back(out);
    s.shape.push_back(in / q->group_size);
    s.dtypes = float_dtypes_;
    s.params = 0;
    out_.push_back(std::move(s));
  }
}

std::vector<int64_t> conv_weight_shape(const WeightLayout& layout, int64_t channels,
                                       int64_t width) {
  if (layout.conv_channels_last) return {channels, width, 1};
  return {channels, 1, width};
}

}  // namespace model_detail

namespace {

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

bool mamba_family(Arch a) {
  return a == Arch::mamba2 || a == Arch::nemotron_h;
}

std::string dtypes_str(const std::vector<DType>& ts) {
  std::string s;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (i) s += '|';
    s += dtype_name(ts[i]);
  }
  return s;
}

std::string file_dtype_str(const SafetensorInfo& info) {
  if (info.dtype) return std::string(dtype_name(*info.dtype));
  std::string s = info.dtype_name;
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return std::tolower(ch); });
  return s;
}

}  // namespace

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

std::string format_bytes(int64_t bytes) {
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf,
                v < 10    ? "%.2f %s"
                : v < 100 ? "%.1f %s"
                          : "%.0f %s",
                v, kUnits[u]);
  return buf;
}

WeightLayout default_layout(const Config& cfg) {
  WeightLayout l;
  if (mamba_family(cfg.arch)) {
    l.prefix = "backbone.";
  } else {
    l.prefix = cfg.nested_text_config ? "model.language_model." : "model.";
  }
  l.lm_head = "lm_head";
  if (cfg.quantization) {
    l.experts = ExpertLayout::mlx_switch;
    l.conv_channels_last = true;
  } else {
    l.experts = cfg.arch == Arch::qwen3_5_moe ? ExpertLayout::fused : ExpertLayout::per_expert;
  }
  return l;
}

WeightLayout detect_layout(const Config& cfg, const Checkpoint& ckpt) {
  WeightLayout l = default_layout(cfg);
  const std::vector<std::string> names = ckpt.names();
  const std::string embed = mamba_family(cfg.arch) ? "embeddings.weight" : "embed_tokens.weight";
  // The shortest name ending in the embedding's name (mtp.* and visual towers have longer ones).
  std::string best;
  for (const std::string& n : names)
    if (ends_with(n, embed) && n.find("mtp.") != 0 && (best.empty() || n.size() < best.size()))
      best = n;
  if (!best.empty()) l.prefix = best.substr(0, best.size() - embed.size());
  if (!ckpt.has("lm_head.weight")) {
    for (const std::string& n : names)
      if (ends_with(n, "lm_head.weight")) {
        l.lm_head = n.substr(0, n.size() - 7);
        break;
      }
  }
  bool switch_mlp = false, fused = false, per_expert = false;
  for (const std::string& n : names) {
    if (n.find(".switch_mlp.") != std::string::npos) switch_mlp = true;
    if (ends_with(n, "experts.gate_up_proj") || ends_with(n, "experts.up_proj")) fused = true;
    if (n.find(".experts.0.") != std::string::npos) per_expert = true;
  }
  if (switch_mlp) {
    l.experts = ExpertLayout::mlx_switch;
  } else if (fused) {
    l.experts = ExpertLayout::fused;
  } else if (per_expert) {
    l.experts = ExpertLayout::per_expert;
  }
  for (const std::string& n : names) {
    if (!ends_with(n, "conv1d.weight")) continue;
    const std::vector<int64_t>& s = ckpt.info(n).shape;
    if (s.size() == 3 && s[2] == 1 && s[1] > 1) l.conv_channels_last = true;
    if (s.size() == 3 && s[1] == 1) l.conv_channels_last = false;
    break;
  }
  return l;
}

ModelSpec describe_model(const Config& cfg, const WeightLayout& layout) {
  ModelSpec spec;
  spec.config = cfg;
  spec.layout = layout;
  if (static_cast<int64_t>(cfg.layers.size()) != cfg.num_layers)
    fail("[model] ", cfg.path, ": the config describes ", cfg.layers.size(), " layers, expected ",
         cfg.num_layers);
  switch (cfg.arch) {
    case Arch::qwen3_next:
    case Arch::qwen3_5:
    case Arch::qwen3_5_moe:
      model_detail::build_qwen(cfg, layout, spec.tensors);
      return spec;
    case Arch::mamba2:
      model_detail::build_mamba2(cfg, layout, spec.tensors);
      return spec;
    case Arch::nemotron_h:
      model_detail::build_nemotron_h(cfg, layout, spec.tensors);
      return spec;
  }
  fail("[model] ", cfg.path, ": unknown architecture '", cfg.model_type, "'");
}

const TensorSpec* ModelSpec::find(const std::string& name) const {
  for (const TensorSpec& t : tensors)
    if (t.name == name) return &t;
  return nullptr;
}

int64_t ModelSpec::parameters() const {
  int64_t n = 0;
  for (const TensorSpec& t : tensors) n += t.params;
  return n;
}

int64_t ModelSpec::ssm_state_bytes() const {
  const Config& c = config;
  const GdnConfig& g = c.gdn;
  const MambaConfig& m = c.mamba;
  // GDN state [Hv, V, K] f32 per layer; Mamba-2 state [H, P, N] f32 per layer.
  return c.count(Mixer::gdn) * g.num_v_heads * g.v_head_dim * g.k_head_dim * 4 +
         c.count(Mixer::mamba) * m.num_heads * m.head_dim * m.state_size * 4;
}

int64_t ModelSpec::conv_state_bytes() const {
  const Config& c = config;
  // The last W - 1 conv inputs [conv_dim, W - 1] f32 per layer.
  return c.count(Mixer::gdn) * c.gdn.conv_dim() * (c.gdn.conv_kernel - 1) * 4 +
         c.count(Mixer::mamba) * c.mamba.conv_dim() * (c.mamba.conv_kernel - 1) * 4;
}

int64_t ModelSpec::kv_bytes_per_token(int64_t kv_dtype_bytes) const {
  const AttentionConfig& a = config.attention;
  return config.count(Mixer::attention) * 2 * a.num_kv_heads * a.head_dim * kv_dtype_bytes;
}

std::map<DType, int64_t> ModelSpec::weight_bytes() const {
  std::map<DType, int64_t> out;
  for (const TensorSpec& t : tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    out[t.dtypes.front()] += n * static_cast<int64_t>(dtype_size(t.dtypes.front()));
  }
  return out;
}

int64_t ModelSpec::total_weight_bytes() const {
  int64_t n = 0;
  for (const auto& [t, b] : weight_bytes()) n += b;
  return n;
}

std::vector<std::string> weight_problems(const ModelSpec& spec, const Checkpoint& ckpt) {
  std::vector<std::string> problems;
  for (const TensorSpec& t : spec.tensors) {
    const std::string expected = shape_str(t.shape) + " " + dtypes_str(t.dtypes);
    if (!ckpt.has(t.name)) {
      problems.push_back(str("[model] ", t.name, ": missing (expected ", expected, ")"));
      continue;
    }
    const SafetensorInfo& info = ckpt.info(t.name);
    bool dtype_ok =
        info.dtype && std::find(t.dtypes.begin(), t.dtypes.end(), *info.dtype) != t.dtypes.end();
    if (info.shape != t.shape || !dtype_ok)
      problems.push_back(str("[model] ", t.name, ": expected ", expected, ", got ",
                             shape_str(info.shape), " ", file_dtype_str(info)));
  }
  return problems;
}

void check_weights(const ModelSpec& spec, const Checkpoint& ckpt) {
  std::vector<std::string> problems = weight_problems(spec, ckpt);
  if (problems.empty()) return;
  if (problems.size() == 1) throw Error(problems.front());
  throw Error(str(problems.front(), " (and ", problems.size() - 1, " more problems)"));
}

std::map<DType, int64_t> checkpoint_weight_bytes(const ModelSpec& spec, const Checkpoint& ckpt) {
  std::map<DType, int64_t> out;
  for (const TensorSpec& t : spec.tensors) {
    if (!ckpt.has(t.name)) continue;
    const SafetensorInfo& info = ckpt.info(t.name);
    if (info.dtype) out[*info.dtype] += static_cast<int64_t>(info.bytes);
  }
  return out;
}

std::map<DType, int64_t> loaded_weight_bytes(
    const ModelSpec& spec, const Checkpoint& ckpt,
    const std::function<bool(const std::string&)>& kept_quantized) {
  std::map<DType, int64_t> out;
  for (size_t i = 0; i < spec.tensors.size(); ++i) {
    const TensorSpec& t = spec.tensors[i];
    if (!ckpt.has(t.name)) continue;
    if (t.bits > 0 && i + 2 < spec.tensors.size() && ckpt.has(spec.tensors[i + 1].name) &&
        !(kept_quantized && kept_quantized(t.name))) {
      // Packed codes [.., out, in·bits/32] -> [.., out, in] in the scales' dtype; the scales and
      // biases (the next two tensors) are not kept.
      const SafetensorInfo& scales = ckpt.info(spec.tensors[i + 1].name);
      int64_t elements = 1;
      for (int64_t d : t.shape) elements *= d;
      elements = elements * 32 / t.bits;
      if (scales.dtype)
        out[*scales.dtype] += elements * static_cast<int64_t>(dtype_size(*scales.dtype));
      i += 2;
      continue;
    }
    const SafetensorInfo& info = ckpt.info(t.name);
    if (info.dtype) out[*info.dtype] += static_cast<int64_t>(info.bytes);
  }
  return out;
}

bool is_routed_experts_weight(const std::string& name) {
  return name.find(".switch_mlp.") != std::string::npos;
}

WeightMemory weight_memory(const ModelSpec& spec, const Checkpoint& ckpt) {
  auto total = [](const std::map<DType, int64_t>& bytes) {
    int64_t n = 0;
    for (const auto& [dtype, b] : bytes) n += b;
    return n;
  };
  return {total(checkpoint_weight_bytes(spec, ckpt)), total(loaded_weight_bytes(spec, ckpt)),
          total(loaded_weight_bytes(spec, ckpt, is_routed_experts_weight))};
}

}  // namespace hybrid
