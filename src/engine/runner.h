// Internal: the forward pass of every supported architecture over one sequence, its weights as
// the ops want them (laid out once at load) and its caches.
//
// Weights (loaded from the Checkpoint onto the device; big matrices keep their stored float dtype,
// vectors (norms, conv, A_log, dt_bias, D, biases) become f32):
//   GDN      in  [conv_dim + Hv·V, H] rows q | k | v | z   (Qwen3-Next's per-key-head groups
//                                                            [q | k | v(r) | z(r)] regrouped)
//            ba  [2·Hv, H] rows b | a                        (Qwen3-Next's [b(r) | a(r)] groups)
//            conv [conv_dim, W]; A_log, dt_bias on the host (the gates are formed there)
//   attention q_proj as stored: per head [q_h | gate_h] when output_gate
//   Mamba-2  in_proj as stored: [z | xBC | dt]; conv [conv_dim, W]
//   MLP      SwiGLU gate_up [2·I, H] (gate rows then up rows), relu² up [I, H]
//   MoE      experts gate_up [E, 2·I, H] (relu²: up [E, I, H]), down [E, H, I];
//            shared expert as one more expert [1, 2·S, H] / [1, H, S]
// Activations are f32 [T, ...]; states f32; the KV cache f32 in pages of 64 tokens.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/context.h"
#include "hybrid/core/tensor.h"
#include "hybrid/model/config.h"
#include "hybrid/model/model.h"

namespace hybrid::engine {

inline constexpr int64_t kPageSize = 64;

struct LayerWeights {
  LayerSpec spec;
  OwnedTensor norm1, norm2;  // pre-mixer / pre-FFN RMSNorm weights [H] f32 (norm2: Qwen only)
  // GDN
  OwnedTensor gdn_in, gdn_ba, conv_w, conv_b, gdn_norm, out_proj, out_proj_b;
  std::vector<float> A_log_host, dt_bias_host;
  // attention
  OwnedTensor q_proj, k_proj, v_proj, o_proj, q_b, k_b, v_b, o_b, q_norm, k_norm;
  // Mamba-2 (conv_w, conv_b, out_proj, out_proj_b shared with GDN's names)
  OwnedTensor in_proj, in_proj_b, A_log, D, dt_bias, gated_norm;
  // dense MLP
  OwnedTensor mlp_gate_up, mlp_up, mlp_down, mlp_up_b, mlp_down_b;
  // MoE
  OwnedTensor router, router_bias, experts_gate_up, experts_down, shared_gate_up, shared_down,
      shared_gate;
};

// The caches of one sequence: recurrent states (one pool row each), conv states and the paged KV
// cache. Pools have one slot (batch 1); the ops take slots / page tables so more can follow.
struct Sequence {
  int64_t length = 0;                         // tokens already run
  int64_t capacity = 0;                       // tokens the KV cache holds
  std::vector<OwnedTensor> ssm_state;         // per layer: GDN [1, Hv, V, K] | Mamba [1, H, P, N]
  std::vector<OwnedTensor> conv_state;        // per layer: [1, conv_dim, W - 1]
  std::vector<OwnedTensor> k_cache, v_cache;  // per attention layer: [pages, 64, Hkv, D]
  OwnedTensor page_table;                     // [1, pages] i32
};

class Runner {
 public:
  // `progress` (optional) is called as the weights load: checkpoint bytes read so far, total.
  Runner(const std::string& dir, Device device,
         const std::function<void(int64_t done, int64_t total)>& progress = {});
  ~Runner();

  const Config& config() const { return cfg_; }
  Device device() const { return device_; }
  Context& context() { return *ctx_; }

  // A fresh sequence (zero states) whose KV cache holds `capacity` tokens.
  Sequence new_sequence(int64_t capacity);
  // Runs `ids` after the tokens already in `seq` (prefill from the saved state, or a decode step
  // when seq.length > 0 and ids.size() == 1) and returns f32 logits: [T, vocab] when all_logits,
  // else [1, vocab] of the last position.
  std::vector<float> forward(Sequence& seq, const std::vector<int32_t>& ids, bool all_logits);

 private:
  void load_weights(const Checkpoint& ckpt, const ModelSpec& spec, int64_t total_bytes,
                    const std::function<void(int64_t, int64_t)>& progress);
  // The varlen arguments of one forward call (one sequence in pool slot 0), made once for all
  // layers: T new tokens, decode = one token after a prefix.
  struct Step {
    int64_t T = 0;
    bool decode = false;
    OwnedTensor slots;      // i32 [1] = {0}
    OwnedTensor cu;         // i32 [2] = {0, T}
    OwnedTensor has_init;   // i32 [1]: 1 when the sequence has a prefix
    OwnedTensor positions;  // i32 [T]: length .. length + T - 1
    OwnedTensor seq_lens;   // i32 [1] = {length + T}
  };
  Step make_step(const Sequence& seq, int64_t T) const;
  // The depthwise causal conv + SiLU of the GDN and Mamba-2 mixers, resuming from conv_state.
  void conv_silu(const LayerWeights& w, const Tensor& x, const Tensor& conv_state, const Step& s,
                 const Tensor& out);
  void gdn_layer(const LayerWeights& w, Sequence& seq, size_t layer, const Tensor& x,
                 const Tensor& out, const Step& s);
  void attention_layer(const LayerWeights& w, Sequence& seq, size_t layer, const Tensor& x,
                       const Tensor& out, const Step& s);
  void mamba_layer(const LayerWeights& w, Sequence& seq, size_t layer, const Tensor& x,
                   const Tensor& out, const Step& s);
  void mlp(const LayerWeights& w, const Tensor& x, const Tensor& out, int64_t T);
  void moe(const LayerWeights& w, const Tensor& x, const Tensor& out, int64_t T);

  OwnedTensor empty(DType dtype, const std::vector<int64_t>& shape) const;
  OwnedTensor ints(const std::vector<int32_t>& values) const;
  OwnedTensor floats(const std::vector<float>& values, const std::vector<int64_t>& shape) const;
  std::vector<float> download(const Tensor& t);  // contiguous f32 tensor -> host

  Config cfg_;
  Device device_;
  std::unique_ptr<Context> ctx_;
  OwnedTensor embed_, final_norm_, lm_head_;
  bool tied_ = false;
  std::vector<LayerWeights> layers_;
  std::vector<int64_t> attn_index_;  // layer -> index into the KV caches (-1: none)
};

}  // namespace hybrid::engine
