// The forward pass of Qwen3-Next / Qwen3.5 (dense, MoE), Mamba2 and Nemotron-H over one sequence,
// as transformers computes it (modeling_qwen3_next.py, modeling_qwen3_5.py, modeling_mamba2.py,
// modeling_nemotron_h.py), built from the public ops. See runner.h for the weight layouts.
#include "engine/runner.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <optional>
#include <set>

#include <unistd.h>

#include "core/cuda_api.h"
#include "hybrid/core/error.h"
#include "hybrid/core/registry.h"
#include "hybrid/model/safetensors.h"
#include "hybrid/ops/attention.h"
#include "hybrid/ops/conv.h"
#include "hybrid/ops/elementwise.h"
#include "hybrid/ops/embed.h"
#include "hybrid/ops/gdn.h"
#include "hybrid/ops/gdn_chunk.h"
#include "hybrid/ops/linear.h"
#include "hybrid/ops/moe.h"
#include "hybrid/ops/norm.h"
#include "hybrid/ops/quant.h"
#include "hybrid/ops/rope.h"
#include "hybrid/ops/sampling.h"
#include "hybrid/ops/ssm.h"

// Op arguments are written as designated initializers that leave the optional fields out (they
// default to "not given"); -Wextra would warn about every one of them.
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

namespace hybrid::engine {

namespace fs = std::filesystem;

namespace {

// Rows of host tensors gathered into one host matrix of a fixed dtype and row length (the packed
// and regrouped projection / expert weights), then uploaded once.
class HostMatrix {
 public:
  HostMatrix(DType dtype, int64_t cols) : dtype_(dtype), cols_(cols) {}
  DType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  // Appends rows [r0, r0 + n) of `src` (a contiguous host tensor read as [rows, cols]).
  void append(const Tensor& src, int64_t r0, int64_t n) {
    if (src.size(-1) != cols_)
      fail("[model] cannot pack ", src.describe(), ": rows of ", cols_, " expected");
    const size_t es = dtype_size(dtype_);
    const size_t at = bytes_.size();
    bytes_.resize(at + static_cast<size_t>(n * cols_) * es);
    if (src.dtype() == dtype_) {
      std::memcpy(bytes_.data() + at, static_cast<const char*>(src.data()) + r0 * cols_ * es,
                  static_cast<size_t>(n * cols_) * es);
    } else {
      for (int64_t i = 0; i < n * cols_; ++i)
        store_element(bytes_.data() + at, dtype_, i,
                      load_element(src.data(), src.dtype(), r0 * cols_ + i));
    }
    rows_ += n;
  }
  void append(const Tensor& src) { append(src, 0, src.numel() / cols_); }
  const void* data() const { return bytes_.data(); }
  size_t bytes() const { return bytes_.size(); }

 private:
  DType dtype_;
  int64_t cols_;
  int64_t rows_ = 0;
  std::vector<char> bytes_;
};

std::vector<float> host_f32(const Tensor& t) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (int64_t i = 0; i < t.numel(); ++i)
    v[static_cast<size_t>(i)] = static_cast<float>(load_element(t.data(), t.dtype(), i));
  return v;
}

// A [T, H, D] view of columns [c0, c0 + H·D) of a [T, cols] f32 matrix.
Tensor heads(const Tensor& m, int64_t c0, int64_t H, int64_t D) {
  return Tensor(m.data_as<float>() + c0, DType::f32, m.device(), {m.size(0), H, D},
                {m.stride(0), D, 1});
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// HYBRID_DEVICE_MEMORY_BUDGET=BYTES: the memory the load may assume the device has, in place of
// the free memory (CUDA) or the physical memory (CPU); lets CPU CI test the "weights larger than
// the device's memory" error. Unset or empty: no budget.
std::optional<size_t> device_memory_budget() {
  const char* v = std::getenv("HYBRID_DEVICE_MEMORY_BUDGET");
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(v, &end, 10);
  if (errno != 0 || *end != '\0' || v[0] == '-')
    fail("[model] HYBRID_DEVICE_MEMORY_BUDGET='", v, "': expected a number of bytes");
  return static_cast<size_t>(n);
}

// The KV cache's dtype for `device`: bf16 on CUDA, where the tensor-core attention kernels take
// 16-bit caches with q in the same dtype (f32 caches run the CUDA-core variants), f32 on the CPU
// (the reference); HYBRID_KV_CACHE_DTYPE=f32 | bf16 | f16 overrides. HF's bf16 models keep bf16
// caches too; the cache halves.
DType kv_cache_dtype(Device device) {
  const char* v = std::getenv("HYBRID_KV_CACHE_DTYPE");
  if (v == nullptr || *v == '\0') return device.is_cuda() ? DType::bf16 : DType::f32;
  for (DType t : {DType::f32, DType::bf16, DType::f16})
    if (dtype_name(t) == std::string(v)) return t;
  fail("[model] HYBRID_KV_CACHE_DTYPE='", v, "': expected f32, bf16 or f16");
}

}  // namespace

// ---- loading ----------------------------------------------------------------------------------

Runner::Runner(const std::string& dir, Device device,
               const std::function<void(int64_t, int64_t)>& progress)
    : device_(device), ws_(device) {
  if (!fs::exists(dir)) fail("[model] ", dir, ": no such file or directory");
  if (!fs::is_directory(dir)) fail("[model] ", dir, ": not a folder (pass the model's folder)");
  if (!fs::exists(fs::path(dir) / "config.json"))
    fail("[model] ", dir, ": not a model folder (no config.json)");
  if (device.is_cuda() && device.index >= cuda_device_count())
    fail("[model] device ", to_string(device), " is not available (", cuda_device_count(),
         " CUDA devices)");
  cfg_ = load_config(dir);
  kv_dtype_ = kv_cache_dtype(device);
  Checkpoint ckpt(dir);
  const ModelSpec spec = describe_model(cfg_, detect_layout(cfg_, ckpt));
  check_weights(spec, ckpt);
  if (cfg_.arch == Arch::nemotron_h ? cfg_.hidden_act != "relu2" : cfg_.hidden_act != "silu")
    fail("[model] ", cfg_.path, ": hidden_act '", cfg_.hidden_act, "' is not supported for ",
         arch_name(cfg_.arch));
  // HYBRID_KEEP_QUANTIZED_EXPERTS: "1" keeps MLX-quantized routed experts quantized on the
  // device (moe_experts_q), "0" dequantizes them at load; unset (auto): kept only when the
  // dequantized weights would not fit and moe_experts_q has a kernel for the device, so a load
  // that fits runs as before and one that would not fit dequantized still loads.
  enum class KeepExperts { automatic, on, off } keep_mode = KeepExperts::automatic;
  if (const char* keep = std::getenv("HYBRID_KEEP_QUANTIZED_EXPERTS"); keep && *keep != '\0')
    keep_mode = std::strcmp(keep, "0") == 0 ? KeepExperts::off : KeepExperts::on;
  const bool has_q_kernel = Registry::builtin().has_kernel(MoeExpertsQ::op_name, device.type);
  if (keep_mode == KeepExperts::on && !has_q_kernel)
    fail("[model] HYBRID_KEEP_QUANTIZED_EXPERTS=1: moe_experts_q has no ", to_string(device.type),
         " kernel in this build (unset it to load the experts dequantized)");
  const WeightMemory memory = weight_memory(spec, ckpt);
  const int64_t stored = memory.stored;  // checkpoint bytes: the total of the load's progress
  std::string keep_note;  // why the experts are kept quantized in auto mode (logged below)
  {
    // Before anything is uploaded: the weights must fit in the device's memory (free memory on
    // CUDA, physical memory on the CPU, or the budget HYBRID_DEVICE_MEMORY_BUDGET sets), counted
    // as the load keeps them: MLX-quantized weights dequantized (~3.6x their 4-bit bytes) unless
    // they are routed experts kept quantized.
    size_t available = 0;
    const char* what = nullptr;
    if (const std::optional<size_t> budget = device_memory_budget()) {
      available = *budget;
      what = " available (HYBRID_DEVICE_MEMORY_BUDGET)";
    } else if (device.is_cuda()) {
      cuda_api::device_memory_bytes(device.index, &available);
      what = " free";
    } else {
      available = static_cast<size_t>(sysconf(_SC_PHYS_PAGES)) *
                  static_cast<size_t>(sysconf(_SC_PAGE_SIZE));
      what = " of memory";
    }
    keep_quantized_experts_ = keep_mode == KeepExperts::on;
    size_t need =
        static_cast<size_t>(keep_quantized_experts_ ? memory.experts_kept : memory.loaded);
    if (need > available && keep_mode == KeepExperts::automatic && has_q_kernel) {
      const auto kept = static_cast<size_t>(memory.experts_kept);
      if (kept < need) {  // the checkpoint has MLX-quantized routed experts
        keep_note =
            str("the routed experts stay MLX-quantized (moe_experts_q): dequantized, the "
                "weights need ",
                format_bytes(static_cast<int64_t>(need)), ", kept ",
                format_bytes(static_cast<int64_t>(kept)), ", ",
                format_bytes(static_cast<int64_t>(available)), what,
                " (HYBRID_KEEP_QUANTIZED_EXPERTS=0 refuses this)");
        keep_quantized_experts_ = true;
        need = kept;
      }
    }
    const bool dequantized = static_cast<int64_t>(need) != stored;
    if (need > available)
      fail("[model] the weights need ", need, " bytes (", format_bytes(static_cast<int64_t>(need)),
           dequantized ? str(" with the MLX-quantized weights dequantized at load",
                             keep_quantized_experts_ ? " except the routed experts" : "", ", ",
                             format_bytes(stored), " as stored")
                       : std::string(),
           ") but ", to_string(device), " has ", available, " bytes (",
           format_bytes(static_cast<int64_t>(available)), ")", what);
  }
  ctx_ = std::make_unique<Context>(device);
  if (!keep_note.empty()) ctx_->log(LogLevel::warn, "[model] " + keep_note);  // shown by default
  load_weights(ckpt, spec, stored, progress);
}

Runner::~Runner() {
  drop_graphs();
}

OwnedTensor Runner::floats(const std::vector<float>& values,
                           const std::vector<int64_t>& shape) const {
  OwnedTensor t(device_, DType::f32, shape);
  copy_bytes(t.data(), device_, values.data(), Device::cpu(), values.size() * sizeof(float), *ctx_);
  ctx_->synchronize();
  return t;
}

Runner::PinnedHost::~PinnedHost() {
  if (ptr) cuda_api::free_host(ptr);  // never touches the CUDA runtime on a CPU-only run
}

void* Runner::PinnedHost::reserve(size_t n) {
  if (n > bytes) {
    void* grown = cuda_api::malloc_host(n);
    if (ptr) cuda_api::free_host(ptr);
    ptr = grown, bytes = n;
  }
  return ptr;
}

// The f32 tensor's values on the host. On CUDA through the page-locked buffer: the copy runs at
// the link's speed, and the vector is built from it in one pass (a pageable copy into a
// zero-filled vector touched the 608 KB of a Qwen3-Next logits row twice more).
std::vector<float> Runner::download(const Tensor& t) {
  const size_t n = static_cast<size_t>(t.numel());
  if (device_.is_cpu()) {
    std::vector<float> v(n);
    copy_bytes(v.data(), Device::cpu(), t.data(), device_, n * sizeof(float), *ctx_);
    return v;
  }
  auto* host = static_cast<float*>(pinned_.reserve(n * sizeof(float)));
  download_into(host, t, n * sizeof(float));
  return std::vector<float>(host, host + n);
}

void Runner::load_weights(const Checkpoint& ckpt, const ModelSpec& spec, int64_t total_bytes,
                          const std::function<void(int64_t, int64_t)>& progress) {
  const Config& c = cfg_;
  const WeightLayout& L = spec.layout;
  const std::string& P = L.prefix;
  Context& ctx = *ctx_;
  const Device dev = device_;

  // MLX-quantized weights are dequantized here (into their scales' dtype) and then take the float
  // path: the packed, regrouped layouts below are built from float rows. A dequantized host copy
  // lives until the next upload (its rows are copied into a HostMatrix before that).
  Context host_ctx(Device::cpu());
  std::vector<std::unique_ptr<OwnedTensor>> dequantized;
  // Bytes of the checkpoint read so far (each tensor counted once; some are viewed twice),
  // reported to `progress` as each tensor is first read.
  int64_t done_bytes = 0;
  std::set<std::string> counted;
  auto count = [&](const std::string& name, const Tensor& t) {
    if (!counted.insert(name).second) return;
    done_bytes += t.numel() * static_cast<int64_t>(dtype_size(t.dtype()));
    if (progress) progress(std::min(done_bytes, total_bytes), total_bytes);
  };
  // The spec of the tensor `name`, or spec.tensors.end().
  auto spec_of = [&](const std::string& name) {
    return std::find_if(spec.tensors.begin(), spec.tensors.end(),
                        [&](const TensorSpec& t) { return t.name == name; });
  };
  auto view = [&](const std::string& name) -> Tensor {
    const Tensor v = ckpt.view(name);
    count(name, v);
    const auto it = spec_of(name);
    if (it == spec.tensors.end() || it->bits == 0) return v;
    const TensorSpec& scales = *(it + 1);
    const TensorSpec& biases = *(it + 2);
    const Tensor sc = ckpt.view(scales.name), bi = ckpt.view(biases.name);
    count(scales.name, sc);
    count(biases.name, bi);
    std::vector<int64_t> shape = v.shape();
    const int64_t in = shape.back() * 32 / it->bits;
    shape.back() = in;
    const int64_t rows = v.numel() / v.size(-1);
    auto w = std::make_unique<OwnedTensor>(Device::cpu(), sc.dtype(), shape);
    dequantize({.q = {.weight = v.reshape({rows, v.size(-1)}),
                      .scales = sc.reshape({rows, sc.size(-1)}),
                      .biases = bi.reshape({rows, bi.size(-1)}),
                      .bits = static_cast<int>(it->bits),
                      .group_size = static_cast<int>(it->group_size)},
                .w = w->view().reshape({rows, in})},
               host_ctx);
    dequantized.push_back(std::move(w));
    return dequantized.back()->view();
  };
  auto upload = [&](const HostMatrix& m, const std::vector<int64_t>& shape) {
    OwnedTensor t(dev, m.dtype(), shape);
    copy_bytes(t.data(), dev, m.data(), Device::cpu(), m.bytes(), ctx);
    ctx.synchronize();
    dequantized.clear();
    return t;
  };
  // A tensor as stored (its float dtype), reshaped to `shape` (same element count).
  // (An empty shape keeps the stored one.)
  auto as_stored = [&](const std::string& name, const std::vector<int64_t>& shape) {
    const Tensor v = view(name);
    HostMatrix m(v.dtype(), v.size(-1));
    m.append(v);
    return upload(m, shape.empty() ? v.shape() : shape);
  };
  auto matrix = [&](const std::string& name) { return as_stored(name, {}); };
  // A small tensor converted to f32.
  auto vec = [&](const std::string& name, std::vector<int64_t> shape = {}) {
    const Tensor v = view(name);
    if (shape.empty()) shape = {v.numel()};
    return floats(host_f32(v), shape);
  };
  auto opt_vec = [&](const std::string& name) {
    return ckpt.has(name) ? vec(name) : OwnedTensor();
  };
  // Rows of several tensors stacked into one matrix in the first one's dtype.
  auto stack = [&](const std::vector<std::string>& names, const std::vector<int64_t>& shape) {
    const Tensor first = view(names.front());
    HostMatrix m(first.dtype(), first.size(-1));
    for (const std::string& n : names) m.append(view(n));
    return upload(m, shape);
  };

  const bool nemotron = c.arch == Arch::nemotron_h;
  const bool qwen = !nemotron && c.arch != Arch::mamba2;
  const int64_t H = c.hidden_size;

  embed_ = matrix(qwen ? P + "embed_tokens.weight" : P + "embeddings.weight");
  final_norm_ = vec(qwen ? P + "norm.weight" : P + "norm_f.weight");
  tied_ = c.tie_word_embeddings;
  if (!tied_) lm_head_ = matrix(L.lm_head + ".weight");

  int64_t n_attn = 0;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    LayerWeights w;
    w.spec = c.layers[static_cast<size_t>(i)];
    const std::string l = P + "layers." + std::to_string(i) + ".";
    attn_index_.push_back(w.spec.mixer == Mixer::attention ? n_attn++ : -1);
    w.norm1 = vec(l + (qwen ? "input_layernorm.weight" : "norm.weight"));
    if (qwen) w.norm2 = vec(l + "post_attention_layernorm.weight");
    const std::string mx = l + (qwen ? "" : "mixer.");

    if (w.spec.mixer == Mixer::gdn) {
      const GdnConfig& g = c.gdn;
      const std::string p = l + "linear_attn.";
      const int64_t Hk = g.num_k_heads, Hv = g.num_v_heads, K = g.k_head_dim, V = g.v_head_dim;
      const int64_t r = Hv / Hk;
      if (c.arch == Arch::qwen3_next) {
        // in_proj_qkvz rows per key head g: [q (K) | k (K) | v (r·V) | z (r·V)] -> q|k|v|z.
        const Tensor qkvz = view(p + "in_proj_qkvz.weight");
        const int64_t grp = 2 * K + 2 * r * V;
        HostMatrix m(qkvz.dtype(), H);
        for (int64_t part = 0; part < 4; ++part) {
          const int64_t off = part == 0 ? 0 : part == 1 ? K : part == 2 ? 2 * K : 2 * K + r * V;
          const int64_t n = part < 2 ? K : r * V;
          for (int64_t gi = 0; gi < Hk; ++gi) m.append(qkvz, gi * grp + off, n);
        }
        // in_proj_ba rows per key head: [b (r) | a (r)] -> b | a, after q|k|v|z in the same
        // matrix when the dtypes agree (one projection launch instead of two), else its own.
        const Tensor ba = view(p + "in_proj_ba.weight");
        const bool one = ba.dtype() == qkvz.dtype();
        HostMatrix mb(ba.dtype(), H);
        HostMatrix& dst = one ? m : mb;
        for (int64_t part = 0; part < 2; ++part)
          for (int64_t gi = 0; gi < Hk; ++gi) dst.append(ba, gi * 2 * r + part * r, r);
        w.gdn_in = upload(m, {g.conv_dim() + g.value_dim() + (one ? 2 * Hv : 0), H});
        if (!one) w.gdn_ba = upload(mb, {2 * Hv, H});
      } else {
        const std::string qkv = p + "in_proj_qkv.weight", z = p + "in_proj_z.weight",
                          b = p + "in_proj_b.weight", a = p + "in_proj_a.weight";
        // Stored dtypes (ckpt.view: no dequantization, no byte count).
        const DType dt = ckpt.view(qkv).dtype();
        if (ckpt.view(b).dtype() == dt && ckpt.view(a).dtype() == dt) {
          w.gdn_in = stack({qkv, z, b, a}, {g.conv_dim() + g.value_dim() + 2 * Hv, H});
        } else {
          w.gdn_in = stack({qkv, z}, {g.conv_dim() + g.value_dim(), H});
          w.gdn_ba = stack({b, a}, {2 * Hv, H});
        }
      }
      w.conv_w = vec(p + "conv1d.weight", {g.conv_dim(), g.conv_kernel});
      w.A_log = vec(p + "A_log");
      w.dt_bias = vec(p + "dt_bias");
      w.gdn_norm = vec(p + "norm.weight");
      w.out_proj = matrix(p + "out_proj.weight");
    } else if (w.spec.mixer == Mixer::attention) {
      const std::string p = qwen ? l + "self_attn." : mx;
      w.q_proj = matrix(p + "q_proj.weight");
      w.k_proj = matrix(p + "k_proj.weight");
      w.v_proj = matrix(p + "v_proj.weight");
      w.o_proj = matrix(p + "o_proj.weight");
      w.q_b = opt_vec(p + "q_proj.bias");
      w.k_b = opt_vec(p + "k_proj.bias");
      w.v_b = opt_vec(p + "v_proj.bias");
      w.o_b = opt_vec(p + "o_proj.bias");
      if (c.attention.qk_norm) {
        w.q_norm = vec(p + "q_norm.weight");
        w.k_norm = vec(p + "k_norm.weight");
      }
    } else if (w.spec.mixer == Mixer::mamba) {
      const MambaConfig& m = c.mamba;
      const std::string p = l + "mixer.";
      w.in_proj = matrix(p + "in_proj.weight");
      w.in_proj_b = opt_vec(p + "in_proj.bias");
      w.conv_w = vec(p + "conv1d.weight", {m.conv_dim(), m.conv_kernel});
      w.conv_b = opt_vec(p + "conv1d.bias");
      w.A_log = vec(p + "A_log");
      w.D = vec(p + "D");
      w.dt_bias = vec(p + "dt_bias");
      w.gated_norm = vec(p + "norm.weight");
      w.out_proj = matrix(p + "out_proj.weight");
      w.out_proj_b = opt_vec(p + "out_proj.bias");
    }

    const std::string f = qwen ? l + "mlp." : mx;
    if (w.spec.ffn == Ffn::dense) {
      if (nemotron) {
        w.mlp_up = matrix(f + "up_proj.weight");
        w.mlp_up_b = opt_vec(f + "up_proj.bias");
        w.mlp_down_b = opt_vec(f + "down_proj.bias");
      } else {
        w.mlp_gate_up =
            stack({f + "gate_proj.weight", f + "up_proj.weight"}, {2 * c.intermediate_size, H});
      }
      w.mlp_down = matrix(f + "down_proj.weight");
    } else if (w.spec.ffn == Ffn::moe) {
      const MoeConfig& m = c.moe;
      const int64_t E = m.num_experts, I = m.intermediate_size;
      if (nemotron && c.mlp_bias)
        fail("[model] ", cfg_.path, ": MoE experts with biases (mlp_bias) are not supported");
      if (ckpt.has(f + "fc1_latent_proj.weight"))
        fail("[model] ", f,
             "fc1_latent_proj: Nemotron-H MoE latent projections (moe_latent_size) "
             "are not supported");
      if (nemotron) w.router_bias = vec(f + "gate.e_score_correction_bias");
      std::vector<std::string> gu, down;
      // Kept quantized: the switch_mlp codes, scales and biases uploaded as they are (gate and up
      // rows interleaved per expert as below), for moe_experts_q.
      auto quantized = [&](const std::string& name) -> const TensorSpec* {
        const auto it = spec_of(name);
        return it != spec.tensors.end() && it->bits > 0 ? &*it : nullptr;
      };
      const std::string gq_name = f + (nemotron ? "switch_mlp.fc1" : "switch_mlp.gate_proj");
      const std::string uq_name = f + "switch_mlp.up_proj";
      const std::string dq_name = f + (nemotron ? "switch_mlp.fc2" : "switch_mlp.down_proj");
      const TensorSpec* gq = quantized(gq_name + ".weight");
      const TensorSpec* uq = nemotron ? gq : quantized(uq_name + ".weight");
      const TensorSpec* dq = quantized(dq_name + ".weight");
      const bool keep_q = keep_quantized_experts_ && L.experts == ExpertLayout::mlx_switch && gq &&
                          uq && dq && gq->bits == uq->bits && gq->group_size == uq->group_size;
      // Qwen's shared expert as one more routed expert (SGLang's shared-experts fusion): its
      // gate / up rows and down matrix stacked after the E routed ones, and its gate as row E of
      // the router. One moe_experts launch pair and one linear serve both, instead of a second
      // pair, the gate's linear and its sigmoid. It needs the routed experts' size and float
      // experts.
      w.shared_folded = !nemotron && !keep_q && m.shared_intermediate_size == I;
      const std::string sx = f + "shared_expert.";
      const int64_t E_stack = E + (w.shared_folded ? 1 : 0);
      w.router = w.shared_folded && m.shared_expert_gate
                     ? stack({f + "gate.weight", f + "shared_expert_gate.weight"}, {E + 1, H})
                     : matrix(f + "gate.weight");
      switch (L.experts) {
        case ExpertLayout::per_expert:
          for (int64_t e = 0; e < E; ++e) {
            const std::string x = f + "experts." + std::to_string(e) + ".";
            if (!nemotron) gu.push_back(x + "gate_proj.weight");
            gu.push_back(x + "up_proj.weight");
            down.push_back(x + "down_proj.weight");
          }
          break;
        case ExpertLayout::fused:
          gu.push_back(f + (nemotron ? "experts.up_proj" : "experts.gate_up_proj"));
          down.push_back(f + "experts.down_proj");
          break;
        case ExpertLayout::mlx_switch:
          if (nemotron) {
            gu.push_back(f + "switch_mlp.fc1.weight");
            down.push_back(f + "switch_mlp.fc2.weight");
          }
          break;
      }
      if (keep_q) {
        auto raw = [&](const std::string& name) {
          const Tensor v = ckpt.view(name);
          count(name, v);
          return v;
        };
        // One of weight / scales / biases of gate_up: [E, 2I, cols] (Qwen: gate_e then up_e per
        // expert) or fc1 as stored [E, I, cols] (Nemotron-H).
        auto gate_up_part = [&](const char* part) {
          const Tensor g = raw(gq_name + part);
          HostMatrix hm(g.dtype(), g.size(-1));
          if (nemotron) {
            hm.append(g);
            return upload(hm, {E, I, g.size(-1)});
          }
          const Tensor u = raw(uq_name + part);
          for (int64_t e = 0; e < E; ++e) {
            hm.append(g, e * I, I);
            hm.append(u, e * I, I);
          }
          return upload(hm, {E, 2 * I, g.size(-1)});
        };
        auto down_part = [&](const char* part) {
          const Tensor d = raw(dq_name + part);
          HostMatrix hm(d.dtype(), d.size(-1));
          hm.append(d);
          return upload(hm, {E, H, d.size(-1)});
        };
        w.experts_gate_up_q = {gate_up_part(".weight"), gate_up_part(".scales"),
                               gate_up_part(".biases"), static_cast<int>(gq->bits),
                               static_cast<int>(gq->group_size)};
        w.experts_down_q = {down_part(".weight"), down_part(".scales"), down_part(".biases"),
                            static_cast<int>(dq->bits), static_cast<int>(dq->group_size)};
      } else if (L.experts == ExpertLayout::mlx_switch && !nemotron) {
        // [E, I, H] gate and up stacks -> per expert [gate_e ; up_e].
        const Tensor gs = view(f + "switch_mlp.gate_proj.weight");
        const Tensor us = view(f + "switch_mlp.up_proj.weight");
        HostMatrix hm(gs.dtype(), H);
        for (int64_t e = 0; e < E; ++e) {
          hm.append(gs, e * I, I);
          hm.append(us, e * I, I);
        }
        if (w.shared_folded) {
          hm.append(view(sx + "gate_proj.weight"));
          hm.append(view(sx + "up_proj.weight"));
        }
        w.experts_gate_up = upload(hm, {E_stack, 2 * I, H});
        down.push_back(f + "switch_mlp.down_proj.weight");
      } else {
        if (w.shared_folded) {
          gu.push_back(sx + "gate_proj.weight");
          gu.push_back(sx + "up_proj.weight");
        }
        w.experts_gate_up = stack(gu, {E_stack, nemotron ? I : 2 * I, H});
      }
      if (w.shared_folded) down.push_back(sx + "down_proj.weight");
      if (w.experts_down_q.bits == 0) w.experts_down = stack(down, {E_stack, H, I});
      if (m.shared_intermediate_size > 0 && !w.shared_folded) {
        const int64_t S = m.shared_intermediate_size;
        if (nemotron) {
          w.shared_gate_up = as_stored(f + "shared_experts.up_proj.weight", {1, S, H});
          w.shared_down = as_stored(f + "shared_experts.down_proj.weight", {1, H, S});
        } else {
          w.shared_gate_up =
              stack({f + "shared_expert.gate_proj.weight", f + "shared_expert.up_proj.weight"},
                    {1, 2 * S, H});
          w.shared_down = as_stored(f + "shared_expert.down_proj.weight", {1, H, S});
          if (m.shared_expert_gate) w.shared_gate = matrix(f + "shared_expert_gate.weight");
        }
      }
    }
    layers_.push_back(std::move(w));
  }
  if (progress) progress(total_bytes, total_bytes);
}

// ---- caches -----------------------------------------------------------------------------------

Sequences Runner::new_sequences(int64_t slots, int64_t capacity) {
  if (slots <= 0) fail("[model] a batch needs at least one sequence, got ", slots);
  if (capacity <= 0) fail("[model] a sequence needs room for at least one token");
  const Config& c = cfg_;
  Sequences s;
  s.slots = slots;
  s.capacity = capacity;
  s.pages = ceil_div(capacity, kPageSize);
  s.length.assign(static_cast<size_t>(slots), 0);
  s.id = next_sequences_id_++;
  // Decode graphs belong to the newest Sequences (an older one still in use is re-captured).
  drop_graphs();
  auto zeros = [&](const std::vector<int64_t>& shape) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return floats(std::vector<float>(static_cast<size_t>(n), 0.0f), shape);
  };
  for (const LayerWeights& w : layers_) {
    OwnedTensor state, conv;
    if (w.spec.mixer == Mixer::gdn) {
      const GdnConfig& g = c.gdn;
      state = zeros({slots, g.num_v_heads, g.v_head_dim, g.k_head_dim});
      conv = zeros({slots, g.conv_dim(), g.conv_kernel - 1});
    } else if (w.spec.mixer == Mixer::mamba) {
      const MambaConfig& m = c.mamba;
      state = zeros({slots, m.num_heads, m.head_dim, m.state_size});
      conv = zeros({slots, m.conv_dim(), m.conv_kernel - 1});
    } else if (w.spec.mixer == Mixer::attention) {
      const AttentionConfig& a = c.attention;
      const std::vector<int64_t> shape = {slots * s.pages, kPageSize, a.num_kv_heads, a.head_dim};
      s.k_cache.emplace_back(device_, kv_dtype_, shape);
      s.v_cache.emplace_back(device_, kv_dtype_, shape);
    }
    s.ssm_state.push_back(std::move(state));
    s.conv_state.push_back(std::move(conv));
  }
  return s;
}

// ---- workspace --------------------------------------------------------------------------------

namespace {
constexpr size_t kWorkspaceAlign = 256;
// Allocations of one forward at most (step, residual stream, one layer's scratch, logits): the
// alignment slack the size estimate adds.
constexpr size_t kMaxTakes = 64;
}  // namespace

void Workspace::reserve(size_t bytes, Context& ctx) {
  if (bytes <= buffer_.bytes()) return;
  ctx.synchronize();  // queued work may still read the old buffer
  buffer_ = Buffer();
  buffer_ = Buffer(device_, bytes);
  ++generation_;
}

Tensor Workspace::take(DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype);
  const size_t at = (used_ + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
  if (at + bytes > buffer_.bytes())
    fail("[model] internal error: the forward's workspace (", buffer_.bytes(),
         " bytes) is too small for ", bytes, " more bytes at offset ", at);
  used_ = at + bytes;
  high_water_ = std::max(high_water_, used_);
  return Tensor(static_cast<char*>(buffer_.data()) + at, dtype, device_, shape);
}

// Bytes of one forward: the step's integers, the residual stream h and its next buffer, xn, mix
// [T, H], the largest layer's scratch (mixer or FFN: each layer releases its scratch), the logits
// [rows, vocab], and the alignment slack. Every count is in 4-byte elements.
size_t Runner::workspace_bytes(int64_t T, int64_t N, int64_t pages, int64_t rows) const {
  const Config& c = cfg_;
  int64_t per_token = 0;  // the largest layer's scratch per token
  for (const LayerWeights& w : layers_) {
    int64_t mixer = 0, ffn = 0;
    if (w.spec.mixer == Mixer::gdn) {
      const GdnConfig& g = c.gdn;
      // proj, ba, g, beta, conv out, o, normed
      mixer = (g.conv_dim() + g.value_dim()) + 2 * g.num_v_heads + 2 * g.num_v_heads +
              g.conv_dim() + g.num_v_heads * g.v_head_dim + g.value_dim();
    } else if (w.spec.mixer == Mixer::attention) {
      const AttentionConfig& a = c.attention;
      const int64_t qw = a.output_gate ? 2 * a.head_dim : a.head_dim;
      // q proj, k, v, normed q, attention out, q in a 16-bit cache's dtype (counted as 4 bytes)
      mixer = a.num_heads * qw + 2 * a.num_kv_heads * a.head_dim + 3 * a.num_heads * a.head_dim;
    } else if (w.spec.mixer == Mixer::mamba) {
      const MambaConfig& m = c.mamba;
      // proj, conv out, y, normed y
      mixer = m.in_proj_dim() + m.conv_dim() + m.num_heads * m.head_dim + m.d_inner();
    }
    if (w.spec.ffn == Ffn::dense) {
      ffn = 3 * c.intermediate_size;  // gate_up, h
    } else if (w.spec.ffn == Ffn::moe) {
      // router logits (+ the folded shared gate), ids, weights (+ the shared column), gate, sw
      ffn = c.moe.num_experts + 1 + 2 * (c.moe.top_k + 1) + 2;
    }
    per_token = std::max({per_token, mixer, ffn});
  }
  const int64_t ints = 3 * T + 4 * N + 1 + N * pages + T;  // see make_step
  const int64_t elems = ints + T * (4 * c.hidden_size + per_token) + rows * c.vocab_size;
  return static_cast<size_t>(elems) * 4 + kMaxTakes * kWorkspaceAlign;
}

// ---- steps ------------------------------------------------------------------------------------

void Runner::check_ids(const Sequences& seqs, int64_t slot, const std::vector<int32_t>& ids) const {
  const int64_t T = static_cast<int64_t>(ids.size());
  const int64_t length = seqs.length[static_cast<size_t>(slot)];
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = ids[static_cast<size_t>(t)];
    if (id < 0 || id >= cfg_.vocab_size)
      fail("[model] token id ", id, " at position ", length + t, " is out of range [0, ",
           cfg_.vocab_size, ")");
  }
  if (length + T > seqs.capacity)
    fail("[model] the sequence holds ", seqs.capacity, " tokens; ", length, " + ", T,
         " do not fit");
}

// The step's integers, in this order in one i32 block (staging_ on the host, one workspace
// allocation on the device): ids [T] | positions [T] | zeros [T] | ones [T] (f32 bits) |
// slots [N] | cu [N+1] | has_init [N] | seq_lens [N] | page_table [N, pages].
Runner::Step Runner::make_step(const Sequences& seqs, const std::vector<int64_t>& slots,
                               const std::vector<std::vector<int32_t>>& pieces) {
  Step s;
  s.N = static_cast<int64_t>(pieces.size());
  for (const auto& p : pieces) s.T += static_cast<int64_t>(p.size());
  const int64_t T = s.T, N = s.N, pages = seqs.pages;
  s.decode = true;
  for (size_t n = 0; n < pieces.size(); ++n)
    s.decode = s.decode && pieces[n].size() == 1 && seqs.length[static_cast<size_t>(slots[n])] > 0;

  const int64_t total = 4 * T + 4 * N + 1 + N * pages;
  staging_.assign(static_cast<size_t>(total), 0);
  int32_t* ids = staging_.data();
  int32_t* pos = ids + T;
  int32_t* ones = pos + 2 * T;  // after the zeros
  int32_t* sl = ones + T;
  int32_t* cu = sl + N;
  int32_t* init = cu + N + 1;
  int32_t* lens = init + N;
  int32_t* table = lens + N;
  const float one = 1.0f;
  for (int64_t t = 0; t < T; ++t) std::memcpy(ones + t, &one, sizeof(float));
  int64_t t = 0;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t slot = slots[static_cast<size_t>(n)];
    const int64_t length = seqs.length[static_cast<size_t>(slot)];
    const std::vector<int32_t>& piece = pieces[static_cast<size_t>(n)];
    sl[n] = static_cast<int32_t>(slot);
    cu[n] = static_cast<int32_t>(t);
    init[n] = length > 0 ? 1 : 0;
    lens[n] = static_cast<int32_t>(length + static_cast<int64_t>(piece.size()));
    for (int64_t p = 0; p < pages; ++p)
      table[n * pages + p] = static_cast<int32_t>(slot * pages + p);
    for (size_t i = 0; i < piece.size(); ++i, ++t) {
      ids[t] = piece[i];
      pos[t] = static_cast<int32_t>(length + static_cast<int64_t>(i));
    }
  }
  cu[N] = static_cast<int32_t>(T);

  const Tensor block = scratch(DType::i32, {total});
  int32_t* d = block.data_as<int32_t>();
  auto view = [&](int32_t* host, std::vector<int64_t> shape, DType dtype = DType::i32) {
    return Tensor(d + (host - staging_.data()), dtype, device_, shape);
  };
  s.ids = view(ids, {T});
  s.positions = view(pos, {T});
  s.zeros = view(pos + T, {T});
  s.ones = view(ones, {T}, DType::f32);
  s.slots = view(sl, {N});
  s.cu = view(cu, {N + 1});
  s.has_init = view(init, {N});
  s.seq_lens = view(lens, {N});
  s.page_table = view(table, {N, pages});
  staging_dst_ = d;
  upload_step();
  return s;
}

void Runner::upload_step() {
  // Asynchronous on CUDA; staging_ stays untouched until the forward's logits are read back.
  copy_bytes(staging_dst_, device_, staging_.data(), Device::cpu(),
             staging_.size() * sizeof(int32_t), *ctx_);
}

// RAII: the workspace bytes taken inside a scope are given back at its end (stream order makes
// reuse by the next layer safe: its kernels run after this layer's).
namespace {
class WorkspaceScope {
 public:
  explicit WorkspaceScope(Workspace& ws) : ws_(ws), mark_(ws.mark()) {}
  ~WorkspaceScope() { ws_.release(mark_); }
  WorkspaceScope(const WorkspaceScope&) = delete;
  WorkspaceScope& operator=(const WorkspaceScope&) = delete;

 private:
  Workspace& ws_;
  size_t mark_;
};
}  // namespace

// ---- layers -----------------------------------------------------------------------------------

void Runner::conv_silu(const LayerWeights& w, const Tensor& x, const Tensor& conv_state,
                       const Step& s, const Tensor& out) {
  if (s.decode) {
    conv1d_update({.x = x,
                   .weight = w.conv_w,
                   .bias = w.conv_b.view(),
                   .out = out,
                   .conv_state = conv_state,
                   .state_slots = s.slots,
                   .silu = true},
                  *ctx_);
  } else {
    conv1d_causal({.x = x,
                   .weight = w.conv_w,
                   .bias = w.conv_b.view(),
                   .out = out,
                   .conv_state = conv_state,
                   .cu_seqlens = s.cu,
                   .state_slots = s.slots,
                   .has_initial_state = s.has_init,
                   .silu = true},
                  *ctx_);
  }
}

// Gated DeltaNet (Qwen3NextGatedDeltaNet):
//   [q|k|v], z = in_proj(x);  b, a = in_proj_ba(x)
//   q|k|v = silu(causal_conv1d([q|k|v]))
//   β = sigmoid(b),  g = −exp(A_log) · softplus(a + dt_bias)      (gdn_gates, on the device)
//   o = gated_delta_rule(L2(q), L2(k), v, g, β)   (scale 1/sqrt(K), state resumed from the pool)
//   out = out_proj(rmsnorm_per_head(o) · w · silu(z))
void Runner::gdn_layer(const LayerWeights& w, Sequences& seqs, size_t layer, const Tensor& x,
                       const Tensor& out, const Step& s) {
  Context& ctx = *ctx_;
  const WorkspaceScope scope(ws_);
  const int64_t T = s.T;
  const GdnConfig& g = cfg_.gdn;
  const int64_t Hk = g.num_k_heads, Hv = g.num_v_heads, K = g.k_head_dim, V = g.v_head_dim;
  const int64_t C = g.conv_dim(), Vd = g.value_dim();

  // proj = [q|k|v (C) | z (Vd) | b | a (2·Hv)], b | a from their own matrix when it is separate.
  const bool ba_apart = w.gdn_ba.view().defined();
  const Tensor proj = scratch(DType::f32, {T, C + Vd + 2 * Hv});
  linear({.x = x, .weight = w.gdn_in, .y = ba_apart ? proj.slice(1, 0, C + Vd) : proj}, ctx);
  const Tensor ba = proj.slice(1, C + Vd, 2 * Hv);
  if (ba_apart) linear({.x = x, .weight = w.gdn_ba, .y = ba}, ctx);
  const Tensor gt = scratch(DType::f32, {T, Hv}), bt = scratch(DType::f32, {T, Hv});
  gdn_gates({.a = ba.slice(1, Hv, Hv),
             .b = ba.slice(1, 0, Hv),
             .A_log = w.A_log,
             .dt_bias = w.dt_bias,
             .g = gt,
             .beta = bt},
            ctx);

  const Tensor& conv_state = seqs.conv_state[layer];
  const Tensor& state = seqs.ssm_state[layer];
  const Tensor co = scratch(DType::f32, {T, C});
  conv_silu(w, proj.slice(1, 0, C), conv_state, s, co);
  const Tensor q = heads(co, 0, Hk, K), k = heads(co, Hk * K, Hk, K),
               v = heads(co, 2 * Hk * K, Hv, V);
  const Tensor o = scratch(DType::f32, {T, Hv, V});
  if (s.decode) {
    gdn_recurrent({.q = q,
                   .k = k,
                   .v = v,
                   .g = gt,
                   .beta = bt,
                   .state = state,
                   .cu_seqlens = s.cu,
                   .state_slots = s.slots,
                   .out = o,
                   .use_qk_l2norm = true},
                  ctx);
  } else {
    gdn_chunk_prefill({.q = q,
                       .k = k,
                       .v = v,
                       .g = gt,
                       .beta = bt,
                       .cu_seqlens = s.cu,
                       .state_slots = s.slots,
                       .has_initial_state = s.has_init,
                       .state = state,
                       .out = o,
                       .use_qk_l2norm = true},
                      ctx);
  }
  const Tensor normed = scratch(DType::f32, {T, Vd});
  rms_norm_gated({.x = o.reshape({T, Vd}),
                  .z = proj.slice(1, C, Vd),
                  .weight = w.gdn_norm,
                  .out = normed,
                  .group_size = V,
                  .eps = static_cast<float>(cfg_.norm_eps),
                  .norm_before_gate = true},
                 ctx);
  linear({.x = normed, .weight = w.out_proj, .bias = w.out_proj_b.view(), .y = out}, ctx);
}

// Softmax attention. Qwen (Qwen3NextAttention, gated): q_proj emits [q_h | gate_h] per head;
// q, k = zero-centred RMSNorm per head, partial NeoX RoPE; out = o_proj(attn · sigmoid(gate)).
// Nemotron-H: plain GQA, no norm, no positional encoding.
void Runner::attention_layer(const LayerWeights& w, Sequences& seqs, size_t layer, const Tensor& x,
                             const Tensor& out, const Step& s) {
  Context& ctx = *ctx_;
  const WorkspaceScope scope(ws_);
  const int64_t T = s.T;
  const AttentionConfig& a = cfg_.attention;
  const int64_t Hq = a.num_heads, Hkv = a.num_kv_heads, D = a.head_dim;
  const int64_t qw = a.output_gate ? 2 * D : D;  // per-head width of q_proj's output
  const Tensor qp = scratch(DType::f32, {T, Hq * qw});
  const Tensor kp = scratch(DType::f32, {T, Hkv * D}), vp = scratch(DType::f32, {T, Hkv * D});
  linear({.x = x, .weight = w.q_proj, .bias = w.q_b.view(), .y = qp}, ctx);
  linear({.x = x, .weight = w.k_proj, .bias = w.k_b.view(), .y = kp}, ctx);
  linear({.x = x, .weight = w.v_proj, .bias = w.v_b.view(), .y = vp}, ctx);

  const Tensor q_raw(qp.data(), DType::f32, device_, {T, Hq, D}, {Hq * qw, qw, 1});
  Tensor q = q_raw;
  const Tensor k = kp.reshape({T, Hkv, D}), v = vp.reshape({T, Hkv, D});
  if (a.qk_norm) {
    const Tensor qn = scratch(DType::f32, {T, Hq, D});
    const float eps = static_cast<float>(cfg_.norm_eps);
    rms_norm({.x = Tensor(qp.data(), DType::f32, device_, {T * Hq, D}, {qw, 1}),
              .weight = w.q_norm,
              .out = qn.reshape({T * Hq, D}),
              .eps = eps,
              .zero_centered = cfg_.zero_centered_norm},
             ctx);
    rms_norm({.x = kp.reshape({T * Hkv, D}),
              .weight = w.k_norm,
              .out = kp.reshape({T * Hkv, D}),
              .eps = eps,
              .zero_centered = cfg_.zero_centered_norm},
             ctx);
    q = qn;
  }
  // With 16-bit caches (CUDA's default) the attention kernels take q in the caches' dtype (their
  // tensor-core variants feed it to the mma as it is): RoPE writes it there. Without RoPE
  // (Nemotron-H) q stays f32 and the CUDA-core variants run.
  Tensor q_attn = q;
  if (a.rotary_dim > 0) {
    const float theta = static_cast<float>(a.rope_theta);
    if (kv_dtype_ != DType::f32) q_attn = scratch(kv_dtype_, {T, Hq, D});
    rope({.x = q,
          .out = q_attn,
          .positions = s.positions,
          .rotary_dim = a.rotary_dim,
          .theta = theta},
         ctx);
    rope({.x = k, .out = k, .positions = s.positions, .rotary_dim = a.rotary_dim, .theta = theta},
         ctx);
  }
  const size_t ai = static_cast<size_t>(attn_index_[layer]);
  const Tensor& kc = seqs.k_cache[ai];
  const Tensor& vc = seqs.v_cache[ai];
  const Tensor ao = scratch(DType::f32, {T, Hq, D});
  if (s.decode) {
    // Token n belongs to sequence n (no cu_seqlens).
    kv_append({.k = k,
               .v = v,
               .k_cache = kc,
               .v_cache = vc,
               .page_table = s.page_table,
               .positions = s.positions},
              ctx);
    attn_decode({.q = q_attn,
                 .k_cache = kc,
                 .v_cache = vc,
                 .page_table = s.page_table,
                 .seq_lens = s.seq_lens,
                 .out = ao},
                ctx);
  } else {
    kv_append({.k = k,
               .v = v,
               .k_cache = kc,
               .v_cache = vc,
               .page_table = s.page_table,
               .cu_seqlens = s.cu,
               .positions = s.positions},
              ctx);
    attn_prefill({.q = q_attn,
                  .k_cache = kc,
                  .v_cache = vc,
                  .page_table = s.page_table,
                  .cu_seqlens = s.cu,
                  .seq_lens = s.seq_lens,
                  .out = ao},
                 ctx);
  }
  if (a.output_gate) {
    const Tensor gate(qp.data_as<float>() + D, DType::f32, device_, {T, Hq, D}, {Hq * qw, qw, 1});
    sigmoid_mul({.x = ao, .gate = gate, .out = ao}, ctx);
  }
  linear({.x = ao.reshape({T, Hq * D}), .weight = w.o_proj, .bias = w.o_b.view(), .y = out}, ctx);
}

// Mamba-2 mixer (Mamba2Mixer / NemotronHMamba2Mixer):
//   z | xBC | dt = in_proj(x);  x | B | C = silu(causal_conv1d(xBC))
//   y = SSD(x, dt, A = −exp(A_log), B, C, D, dt_bias, softplus, time_step_limit)
//   out = out_proj(rmsnorm_groups(y · silu(z)) · w)      groups of d_inner / n_groups channels
void Runner::mamba_layer(const LayerWeights& w, Sequences& seqs, size_t layer, const Tensor& x,
                         const Tensor& out, const Step& s) {
  Context& ctx = *ctx_;
  const WorkspaceScope scope(ws_);
  const int64_t T = s.T;
  const MambaConfig& m = cfg_.mamba;
  const int64_t Hh = m.num_heads, Pd = m.head_dim, N = m.state_size, G = m.n_groups;
  const int64_t di = m.d_inner(), C = m.conv_dim();
  const Tensor proj = scratch(DType::f32, {T, m.in_proj_dim()});
  linear({.x = x, .weight = w.in_proj, .bias = w.in_proj_b.view(), .y = proj}, ctx);
  const Tensor z = proj.slice(1, 0, di);
  const Tensor xbc = proj.slice(1, di, C);
  const Tensor dt = proj.slice(1, di + C, Hh);

  const Tensor& conv_state = seqs.conv_state[layer];
  const Tensor& state = seqs.ssm_state[layer];
  const Tensor co = scratch(DType::f32, {T, C});
  conv_silu(w, xbc, conv_state, s, co);
  const Tensor xs = heads(co, 0, Hh, Pd), B = heads(co, di, G, N), Cm = heads(co, di + G * N, G, N);
  const Tensor y = scratch(DType::f32, {T, Hh, Pd});
  const float dt_min = static_cast<float>(m.dt_min), dt_max = static_cast<float>(m.dt_max);
  if (s.decode) {
    ssm_step({.x = xs,
              .dt = dt,
              .A_log = w.A_log,
              .B = B,
              .C = Cm,
              .D = w.D,
              .dt_bias = w.dt_bias,
              .state = state,
              .state_slots = s.slots,
              .y = y,
              .dt_softplus = true,
              .dt_min = dt_min,
              .dt_max = dt_max},
             ctx);
  } else {
    // The chunk length does not change the result; the scan takes 64, 128 or 256.
    const int64_t Q =
        (m.chunk_size == 64 || m.chunk_size == 128 || m.chunk_size == 256) ? m.chunk_size : 64;
    ssm_chunk_scan({.x = xs,
                    .dt = dt,
                    .A_log = w.A_log,
                    .B = B,
                    .C = Cm,
                    .D = w.D,
                    .dt_bias = w.dt_bias,
                    .cu_seqlens = s.cu,
                    .state_slots = s.slots,
                    .has_initial_state = s.has_init,
                    .state = state,
                    .y = y,
                    .chunk_size = Q,
                    .dt_softplus = true,
                    .dt_min = dt_min,
                    .dt_max = dt_max},
                   ctx);
  }
  const Tensor yn = scratch(DType::f32, {T, di});
  rms_norm_gated({.x = y.reshape({T, di}),
                  .z = z,
                  .weight = w.gated_norm,
                  .out = yn,
                  .group_size = m.norm_group_size(),
                  .eps = static_cast<float>(cfg_.norm_eps),
                  .norm_before_gate = false},
                 ctx);
  linear({.x = yn, .weight = w.out_proj, .bias = w.out_proj_b.view(), .y = out}, ctx);
}

// Dense MLP: SwiGLU down(silu(gate(x)) · up(x)) (Qwen), relu² down(relu(up(x))²) (Nemotron-H).
void Runner::mlp(const LayerWeights& w, const Tensor& x, const Tensor& out, int64_t T) {
  Context& ctx = *ctx_;
  const WorkspaceScope scope(ws_);
  const int64_t I = cfg_.intermediate_size;
  if (w.mlp_gate_up.view().defined()) {
    const Tensor gu = scratch(DType::f32, {T, 2 * I}), h = scratch(DType::f32, {T, I});
    linear({.x = x, .weight = w.mlp_gate_up, .y = gu}, ctx);
    silu_mul({.gate_up = gu, .out = h}, ctx);
    linear({.x = h, .weight = w.mlp_down, .y = out}, ctx);
  } else {
    const Tensor h = scratch(DType::f32, {T, I});
    linear({.x = x, .weight = w.mlp_up, .bias = w.mlp_up_b.view(), .y = h}, ctx);
    relu2({.x = h, .out = h}, ctx);
    linear({.x = h, .weight = w.mlp_down, .bias = w.mlp_down_b.view(), .y = out}, ctx);
  }
}

// Sparse MoE. Qwen: softmax top-k (renormalised when norm_topk_prob) SwiGLU experts, plus the
// shared expert scaled by sigmoid(shared_expert_gate(x)). Nemotron-H: sigmoid scores with
// e_score_correction_bias for selection, grouped top-k, routed_scaling_factor, relu² experts,
// plus the shared experts.
void Runner::moe(const LayerWeights& w, const Tensor& x, const Tensor& out, const Step& s) {
  Context& ctx = *ctx_;
  const WorkspaceScope scope(ws_);
  const int64_t T = s.T;
  const MoeConfig& m = cfg_.moe;
  const bool nemotron = cfg_.arch == Arch::nemotron_h;
  const MoeActivation act = nemotron ? MoeActivation::relu2 : MoeActivation::swiglu;
  const int64_t E = m.num_experts;
  // Folded shared expert: its gate is the router's column E, its id E is the last column of ids.
  const bool fold = w.shared_folded, gate_column = fold && m.shared_expert_gate;
  const Tensor logits = scratch(DType::f32, {T, E + (gate_column ? 1 : 0)});
  linear({.x = x, .weight = w.router, .y = logits}, ctx);
  const int64_t columns = m.top_k + (fold ? 1 : 0);
  const Tensor ids = scratch(DType::i32, {T, columns}), weights = scratch(DType::f32, {T, columns});
  moe_route({.logits = gate_column ? logits.slice(1, 0, E) : logits,
             .bias = w.router_bias.view(),
             .ids = ids,
             .weights = weights,
             .top_k = m.top_k,
             .score = m.sigmoid_router ? MoeScore::sigmoid : MoeScore::softmax,
             .renormalize = m.norm_topk_prob,
             .n_group = m.n_group,
             .topk_group = m.topk_group,
             .scaling = static_cast<float>(m.routed_scaling_factor),
             .shared_expert = fold,
             .shared_gate = gate_column ? logits.slice(1, E, 1) : Tensor()},
            ctx);
  if (w.experts_gate_up_q.bits > 0)
    moe_experts_q({.x = x,
                   .gate_up = w.experts_gate_up_q.view(),
                   .down = w.experts_down_q.view(),
                   .ids = ids,
                   .weights = weights,
                   .out = out,
                   .activation = act},
                  ctx);
  else
    moe_experts({.x = x,
                 .gate_up = w.experts_gate_up,
                 .down = w.experts_down,
                 .ids = ids,
                 .weights = weights,
                 .out = out,
                 .activation = act},
                ctx);
  if (!w.shared_gate_up.view().defined()) return;
  // The shared expert as expert 0 of a one-expert stack, weight 1 (or sigmoid(gate(x))).
  Tensor sw = s.ones.reshape({T, 1});
  if (w.shared_gate.view().defined()) {
    const Tensor gl = scratch(DType::f32, {T, 1});
    linear({.x = x, .weight = w.shared_gate, .y = gl}, ctx);
    const Tensor gated = scratch(DType::f32, {T, 1});
    sigmoid_mul({.x = sw, .gate = gl, .out = gated}, ctx);  // 1 · sigmoid(gate(x))
    sw = gated;
  }
  moe_experts({.x = x,
               .gate_up = w.shared_gate_up,
               .down = w.shared_down,
               .ids = s.zeros.reshape({T, 1}),
               .weights = sw,
               .out = out,
               .activation = act,
               .accumulate = true},
              ctx);
}

// ---- the model --------------------------------------------------------------------------------

Tensor Runner::run_layers(Sequences& seqs, const Step& step, int64_t rows) {
  Context& ctx = *ctx_;
  const Config& c = cfg_;
  const int64_t T = step.T, H = c.hidden_size;
  const float eps = static_cast<float>(c.norm_eps);
  const bool zc = c.zero_centered_norm;
  // The residual stream lives in h; each sublayer writes its output to mix, and the next norm adds
  // it in (rms_norm's fused residual: h_next = mix + h, xn = norm(h_next)), so the stream moves
  // between two buffers instead of a residual_add launch per sublayer.
  Tensor h = scratch(DType::f32, {T, H}), h_next = scratch(DType::f32, {T, H});
  const Tensor xn = scratch(DType::f32, {T, H}), mix = scratch(DType::f32, {T, H});
  const Tensor logits = scratch(DType::f32, {rows, c.vocab_size});
  bool pending = false;  // mix holds a sublayer output not yet added to h
  // xn[r0, r0 + n) = norm(h (+ mix)) over those rows.
  auto norm = [&](const Tensor& weight, int64_t r0, int64_t n, const Tensor& out) {
    if (!pending) {
      rms_norm(
          {.x = h.slice(0, r0, n), .weight = weight, .out = out, .eps = eps, .zero_centered = zc},
          ctx);
      return;
    }
    rms_norm({.x = mix.slice(0, r0, n),
              .weight = weight,
              .out = out,
              .residual = h.slice(0, r0, n),
              .residual_out = h_next.slice(0, r0, n),
              .eps = eps,
              .zero_centered = zc},
             ctx);
    std::swap(h, h_next);
    pending = false;
  };
  embed_gather({.table = embed_, .ids = step.ids, .out = h}, ctx);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const LayerWeights& w = layers_[i];
    if (w.spec.mixer != Mixer::none) {
      norm(w.norm1, 0, T, xn);
      switch (w.spec.mixer) {
        case Mixer::gdn:
          gdn_layer(w, seqs, i, xn, mix, step);
          break;
        case Mixer::attention:
          attention_layer(w, seqs, i, xn, mix, step);
          break;
        case Mixer::mamba:
          mamba_layer(w, seqs, i, xn, mix, step);
          break;
        case Mixer::none:
          break;
      }
      pending = true;
    }
    if (w.spec.ffn != Ffn::none) {
      norm(w.spec.mixer != Mixer::none ? w.norm2 : w.norm1, 0, T, xn);
      if (w.spec.ffn == Ffn::dense) {
        mlp(w, xn, mix, T);
      } else {
        moe(w, xn, mix, step);
      }
      pending = true;
    }
  }
  // The final norm reads only the rows that get logits (the last `rows` tokens).
  const Tensor xl = xn.slice(0, 0, rows);
  norm(final_norm_, T - rows, rows, xl);
  linear({.x = xl, .weight = tied_ ? embed_.view() : lm_head_.view(), .y = logits}, ctx);
  return logits;
}

std::vector<float> Runner::forward(Sequences& seqs, int64_t slot, const std::vector<int32_t>& ids,
                                   bool all_logits) {
  const int64_t T = static_cast<int64_t>(ids.size());
  if (T == 0) fail("[model] no tokens to run");
  if (slot < 0 || slot >= seqs.slots)
    fail("[model] slot ", slot, " is out of range [0, ", seqs.slots, ")");
  check_ids(seqs, slot, ids);
  const int64_t rows = all_logits ? T : 1;
  ws_.reserve(workspace_bytes(T, 1, seqs.pages, rows), *ctx_);
  ws_.reset();
  const Step step = make_step(seqs, {slot}, {ids});
  const Tensor logits = run_layers(seqs, step, rows);
  seqs.length[static_cast<size_t>(slot)] += T;
  return download(logits);
}

std::vector<float> Runner::decode(Sequences& seqs, const std::vector<int64_t>& slots,
                                  const std::vector<int32_t>& ids) {
  return download(decode_step(seqs, slots, ids));
}

// The first n elements of `buf` (dtype, 1-D), which grows to the largest n asked for.
Tensor Runner::grown(OwnedTensor& buf, DType dtype, int64_t n) {
  if (!buf.view().defined() || buf.view().numel() < n) buf = OwnedTensor(device_, dtype, {n});
  return buf.view().slice(0, 0, n);
}

// A device tensor's bytes into host storage of `bytes`, then the stream drained.
void Runner::download_into(void* host, const Tensor& t, size_t bytes) {
  copy_bytes(host, Device::cpu(), t.data(), device_, bytes, *ctx_);
  ctx_->synchronize();
}

std::vector<int32_t> Runner::decode_argmax(Sequences& seqs, const std::vector<int64_t>& slots,
                                           const std::vector<int32_t>& ids,
                                           const Penalty& penalty) {
  const Tensor logits = penalised_step(seqs, slots, ids, penalty);
  const int64_t N = logits.size(0);
  const Tensor out = grown(chosen_ids_, DType::i32, N);
  argmax({.x = logits, .out = out}, *ctx_);
  std::vector<int32_t> v(static_cast<size_t>(N));
  download_into(v.data(), out, v.size() * sizeof(int32_t));
  return v;
}

Tensor Runner::penalised_step(Sequences& seqs, const std::vector<int64_t>& slots,
                              const std::vector<int32_t>& ids, const Penalty& penalty) {
  // Checked before the step runs: a bad argument must not advance the sequences.
  if (penalty.value != 1.0f && penalty.ids.size() != ids.size())
    fail("[model] repetition penalty: ", penalty.ids.size(), " id lists for ", ids.size(),
         " sequences");
  const Tensor logits = decode_step(seqs, slots, ids);
  if (penalty.value == 1.0f) return logits;
  const int64_t N = logits.size(0);
  int64_t H = 1;
  for (const std::vector<int32_t>& row : penalty.ids)
    H = std::max<int64_t>(H, static_cast<int64_t>(row.size()));
  std::vector<int32_t> seen(static_cast<size_t>(N * H), 0), counts(static_cast<size_t>(N));
  for (int64_t n = 0; n < N; ++n) {
    const std::vector<int32_t>& row = penalty.ids[static_cast<size_t>(n)];
    std::copy(row.begin(), row.end(), seen.begin() + n * H);
    counts[static_cast<size_t>(n)] = static_cast<int32_t>(row.size());
  }
  const Tensor d_ids = grown(penalty_ids_, DType::i32, N * H).reshape({N, H});
  const Tensor d_counts = grown(penalty_counts_, DType::i32, N);
  copy_bytes(d_ids.data(), device_, seen.data(), Device::cpu(), seen.size() * 4, *ctx_);
  copy_bytes(d_counts.data(), device_, counts.data(), Device::cpu(), counts.size() * 4, *ctx_);
  repetition_penalty({.x = logits, .ids = d_ids, .counts = d_counts, .penalty = penalty.value},
                     *ctx_);
  return logits;
}

// The top_k op's k best of each row of `logits`, downloaded (the stream drained).
Runner::Candidates Runner::candidates_of(const Tensor& logits, int64_t k) {
  const int64_t N = logits.size(0);
  const Tensor out_ids = grown(top_ids_, DType::i32, N * k).reshape({N, k});
  const Tensor out_values = grown(top_values_, DType::f32, N * k).reshape({N, k});
  top_k({.x = logits, .ids = out_ids, .values = out_values}, *ctx_);
  Candidates r{std::vector<int32_t>(static_cast<size_t>(N * k)),
               std::vector<float>(static_cast<size_t>(N * k))};
  copy_bytes(r.ids.data(), Device::cpu(), out_ids.data(), device_, r.ids.size() * 4, *ctx_);
  download_into(r.values.data(), out_values, r.values.size() * 4);
  return r;
}

Runner::Candidates Runner::decode_top_k(Sequences& seqs, const std::vector<int64_t>& slots,
                                        const std::vector<int32_t>& ids, int64_t k,
                                        const Penalty& penalty) {
  const Tensor logits = penalised_step(seqs, slots, ids, penalty);
  return candidates_of(logits, k);
}

Runner::Nucleus Runner::decode_top_p(Sequences& seqs, const std::vector<int64_t>& slots,
                                     const std::vector<int32_t>& ids, int64_t k, float temperature,
                                     const Penalty& penalty) {
  const Tensor logits = penalised_step(seqs, slots, ids, penalty);
  const int64_t N = logits.size(0);
  const Tensor mass = grown(masses_, DType::f64, N);
  softmax_mass({.x = logits, .out = mass, .temperature = temperature}, *ctx_);
  Nucleus r{candidates_of(logits, k), std::vector<double>(static_cast<size_t>(N))};
  download_into(r.mass.data(), mass, r.mass.size() * 8);  // (computed before the candidates)
  nucleus_logits_ = logits;
  return r;
}

std::vector<float> Runner::logits_row(int64_t n) {
  if (!nucleus_logits_.defined() || n < 0 || n >= nucleus_logits_.size(0))
    fail("[model] logits_row: no row ", n, " of a decode_top_p step");
  std::vector<float> row(static_cast<size_t>(nucleus_logits_.size(1)));
  download_into(row.data(), nucleus_logits_.slice(0, n, 1), row.size() * 4);
  return row;
}

std::vector<int32_t> Runner::decode_sample(Sequences& seqs, const std::vector<int64_t>& slots,
                                           const std::vector<int32_t>& ids,
                                           const std::vector<int64_t>& draws, float temperature,
                                           float min_p, const Penalty& penalty) {
  if (draws.size() != ids.size())
    fail("[model] decode_sample: ", draws.size(), " draws for ", ids.size(), " sequences");
  const Tensor logits = penalised_step(seqs, slots, ids, penalty);
  const int64_t N = logits.size(0);
  const Tensor out = grown(chosen_ids_, DType::i32, N), d = grown(draws_, DType::i64, N);
  copy_bytes(d.data(), device_, draws.data(), Device::cpu(), draws.size() * 8, *ctx_);
  sample_rows({.x = logits, .draws = d, .out = out, .temperature = temperature, .min_p = min_p},
              *ctx_);
  std::vector<int32_t> v(static_cast<size_t>(N));
  download_into(v.data(), out, v.size() * sizeof(int32_t));
  return v;
}

Tensor Runner::decode_step(Sequences& seqs, const std::vector<int64_t>& slots,
                           const std::vector<int32_t>& ids) {
  const int64_t N = static_cast<int64_t>(ids.size());
  if (N == 0) fail("[model] decode: no sequences");
  if (static_cast<int64_t>(slots.size()) != N)
    fail("[model] decode: ", slots.size(), " slots for ", N, " token ids");
  std::vector<bool> seen(static_cast<size_t>(seqs.slots), false);
  std::vector<std::vector<int32_t>> pieces;
  for (int64_t n = 0; n < N; ++n) {
    const int64_t slot = slots[static_cast<size_t>(n)];
    if (slot < 0 || slot >= seqs.slots)
      fail("[model] decode: slot ", slot, " is out of range [0, ", seqs.slots, ")");
    if (seen[static_cast<size_t>(slot)]) fail("[model] decode: slot ", slot, " appears twice");
    seen[static_cast<size_t>(slot)] = true;
    if (seqs.length[static_cast<size_t>(slot)] == 0)
      fail("[model] decode: slot ", slot, " has no tokens yet (prefill it first)");
    pieces.push_back({ids[static_cast<size_t>(n)]});
    check_ids(seqs, slot, pieces.back());
  }
  ws_.reserve(workspace_bytes(N, N, seqs.pages, N), *ctx_);
  ws_.reset();
  const Step step = make_step(seqs, slots, pieces);  // (uploads the step's integers)

  Tensor logits;
  if (device_.is_cuda() && graphs_on_) {
    auto it = std::find_if(graphs_.begin(), graphs_.end(),
                           [&](const DecodeGraph& g) { return g.seqs_id == seqs.id && g.N == N; });
    if (it == graphs_.end()) {
      graphs_.push_back(DecodeGraph{.seqs_id = seqs.id, .N = N});
      it = graphs_.end() - 1;
    }
    DecodeGraph& g = *it;
    // A graph bakes in every device pointer of the step: the workspace (the step's integers,
    // activations, logits), the context's scratch buffer (cuBLASLt, attention partials) and the
    // Sequences' pools. Re-capture when either buffer was reallocated since.
    void* ctx_ws = ctx_->workspace(0);
    if (g.exec && (g.ws_generation != ws_.generation() || g.ctx_workspace != ctx_ws)) {
      cuda_api::graph_destroy(g.exec);
      g.exec = nullptr;
    }
    if (g.exec) {
      cuda_api::graph_launch(g.exec, ctx_->stream());
      logits = g.logits;
      ++graph_replays_;
    } else if (!g.warm) {
      // First step of this shape: eager, so that every op sizes its scratch outside a capture.
      logits = run_layers(seqs, step, N);
      g.warm = true;
    } else {
      const size_t mark = ws_.mark();
      bool captured = false;
      cuda_api::graph_capture_begin(ctx_->stream());
      try {
        logits = run_layers(seqs, step, N);
        g.exec = cuda_api::graph_capture_end(ctx_->stream());
        captured = true;
      } catch (const Error& e) {
        // An op that cannot be captured: say so once and run decode steps eagerly from now on
        // (CudaGraph.ReplayedDecodeEqualsEagerDecode counts the captures, so a test notices).
        cuda_api::graph_capture_abort(ctx_->stream());
        ctx_->log(LogLevel::warn, std::string("CUDA graph capture of the decode step failed (") +
                                      e.what() + "); decoding without graphs");
        graphs_on_ = false;
        drop_graphs();
      } catch (...) {
        cuda_api::graph_capture_abort(ctx_->stream());
        throw;
      }
      if (captured) {
        g.ws_generation = ws_.generation();
        g.ctx_workspace = ctx_->workspace(0);
        g.logits = logits;
        ++graph_captures_;
        // The capture recorded the step without running it: run it now.
        cuda_api::graph_launch(g.exec, ctx_->stream());
        ++graph_replays_;
      } else {
        ws_.release(mark);
        logits = run_layers(seqs, step, N);
      }
    }
  } else {
    logits = run_layers(seqs, step, N);
  }
  for (int64_t slot : slots) seqs.length[static_cast<size_t>(slot)] += 1;
  return logits;
}

void Runner::set_cuda_graphs(bool on) {
  if (!on) drop_graphs();
  graphs_on_ = on;
}

void Runner::drop_graphs() {
  for (DecodeGraph& g : graphs_) cuda_api::graph_destroy(g.exec);
  graphs_.clear();
}

}  // namespace hybrid::engine
