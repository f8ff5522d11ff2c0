// Internal: the forward pass of every supported architecture over one sequence, its weights as
// the ops want them (laid out once at load) and its caches.
//
// Weights (loaded from the Checkpoint onto the device; big matrices keep their stored float dtype,
// vectors (norms, conv, A_log, dt_bias, D, biases) become f32):
//   GDN      in  [conv_dim + Hv·V, H] rows q | k | v | z   (Qwen3-Next's per-key-head groups
//                                                            [q | k | v(r) | z(r)] regrouped)
//            ba  [2·Hv, H] rows b | a                        (Qwen3-Next's [b(r) | a(r)] groups)
//            conv [conv_dim, W]; A_log, dt_bias [Hv] f32 (gdn_gates forms g, β on the device)
//   attention q_proj as stored: per head [q_h | gate_h] when output_gate
//   Mamba-2  in_proj as stored: [z | xBC | dt]; conv [conv_dim, W]
//   MLP      SwiGLU gate_up [2·I, H] (gate rows then up rows), relu² up [I, H]
//   MoE      experts gate_up [E, 2·I, H] (relu²: up [E, I, H]), down [E, H, I];
//            shared expert as one more expert [1, 2·S, H] / [1, H, S]
// Activations are f32 [T, ...]; states f32; the KV cache f32 in pages of 64 tokens.
//
// Memory during a forward: every intermediate is a view into the Runner's Workspace, one device
// buffer with a bump allocator reset at the start of each forward and sized before it from the
// model's dimensions and the step's token count (grown only between forwards). A forward thus
// allocates nothing on the device, and on CUDA it never waits for the device until the logits
// are read back at its end (the step's integer inputs go up in one asynchronous copy).
//
// Several sequences: a Sequences object holds S slots (one recurrent-state pool row, one conv
// state row and `capacity` tokens of KV pages per slot). forward() runs one piece of one slot
// (prefill, or a single decode step); decode() runs one token of each of several slots as ONE
// forward over all of them. On CUDA, decode() is captured in a CUDA graph per (Sequences, batch
// size) and replayed (docs/ENGINE.md, "CUDA graphs").
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
#include "hybrid/ops/moe.h"

namespace hybrid::engine {

inline constexpr int64_t kPageSize = 64;

// Routed experts kept in MLX's quantized format (HYBRID_KEEP_QUANTIZED_EXPERTS=1): codes, scales
// and biases as uploaded; bits = 0 when the layer's experts are float (or dequantized).
struct OwnedQuantizedExperts {
  OwnedTensor weight, scales, biases;
  int bits = 0, group_size = 0;
  QuantizedExperts view() const {
    return {weight.view(), scales.view(), biases.view(), bits, group_size};
  }
};

struct LayerWeights {
  LayerSpec spec;
  OwnedTensor norm1, norm2;  // pre-mixer / pre-FFN RMSNorm weights [H] f32 (norm2: Qwen only)
  // GDN (A_log, dt_bias shared with Mamba-2's names)
  OwnedTensor gdn_in, gdn_ba, conv_w, conv_b, gdn_norm, out_proj, out_proj_b;
  // attention
  OwnedTensor q_proj, k_proj, v_proj, o_proj, q_b, k_b, v_b, o_b, q_norm, k_norm;
  // Mamba-2 (conv_w, conv_b, out_proj, out_proj_b shared with GDN's names)
  OwnedTensor in_proj, in_proj_b, A_log, D, dt_bias, gated_norm;
  // dense MLP
  OwnedTensor mlp_gate_up, mlp_up, mlp_down, mlp_up_b, mlp_down_b;
  // MoE
  OwnedTensor router, router_bias, experts_gate_up, experts_down, shared_gate_up, shared_down,
      shared_gate;
  OwnedQuantizedExperts experts_gate_up_q, experts_down_q;  // instead of the two above when kept
  // Qwen's shared expert folded in as expert E of experts_gate_up / experts_down (when its size is
  // the routed experts' and they are not kept quantized), its gate as row E of router; then
  // shared_gate_up / shared_down / shared_gate stay empty.
  bool shared_folded = false;
};

// The caches of `slots` sequences: recurrent states (pool row s = slot s), conv states and the
// paged KV cache (slot s owns pages [s·pages, (s+1)·pages), pages = ceil(capacity / 64)).
struct Sequences {
  int64_t slots = 0;
  int64_t capacity = 0;                       // tokens the KV cache holds per slot
  int64_t pages = 0;                          // KV pages per slot
  std::vector<int64_t> length;                // per slot: tokens already run
  std::vector<OwnedTensor> ssm_state;         // per layer: GDN [S, Hv, V, K] | Mamba [S, H, P, N]
  std::vector<OwnedTensor> conv_state;        // per layer: [S, conv_dim, W - 1]
  std::vector<OwnedTensor> k_cache, v_cache;  // per attention layer: [S·pages, 64, Hkv, D]
  uint64_t id = 0;  // unique per Runner (CUDA graphs are captured against one Sequences)
};
using Sequence = Sequences;  // one slot

// A bump allocator over one device buffer (see above). take() never allocates: running out is an
// internal error (the size estimate missed something), not a reason to grow inside a forward.
class Workspace {
 public:
  explicit Workspace(Device device) : device_(device) {}
  // Makes the buffer at least `bytes` long; reallocates (after waiting for `ctx`) only when it is
  // shorter. Call between forwards only.
  void reserve(size_t bytes, Context& ctx);
  void reset() { used_ = 0; }
  size_t mark() const { return used_; }
  void release(size_t mark) { used_ = mark; }
  // A contiguous tensor of the next free bytes (256-byte aligned).
  Tensor take(DType dtype, const std::vector<int64_t>& shape);
  size_t capacity() const { return buffer_.bytes(); }
  size_t high_water() const { return high_water_; }
  uint64_t generation() const { return generation_; }  // +1 on every reallocation

 private:
  Device device_;
  Buffer buffer_;
  size_t used_ = 0, high_water_ = 0;
  uint64_t generation_ = 0;
};

// Sampler's repetition penalty, applied to a decode step's logits on the device (the
// repetition_penalty op) before Runner::decode_argmax / decode_top_k / decode_sample choose: row
// n's distinct history ids (prompt + output) and the penalty. value 1: none.
struct Penalty {
  float value = 1.0f;
  std::vector<std::vector<int32_t>> ids;
};

class Runner {
 public:
  // `progress` (optional) is called as the weights load: checkpoint bytes read so far, total.
  Runner(const std::string& dir, Device device,
         const std::function<void(int64_t done, int64_t total)>& progress = {});
  ~Runner();

  const Config& config() const { return cfg_; }
  Device device() const { return device_; }
  // The KV cache's dtype: bf16 on CUDA (the tensor-core attention kernels' input), f32 on the
  // CPU; HYBRID_KV_CACHE_DTYPE=f32 | bf16 | f16 picks another.
  DType kv_dtype() const { return kv_dtype_; }
  Context& context() { return *ctx_; }

  // Fresh sequences (zero states) whose KV cache holds `capacity` tokens each.
  Sequences new_sequences(int64_t slots, int64_t capacity);
  Sequence new_sequence(int64_t capacity) { return new_sequences(1, capacity); }
  // Runs `ids` after the tokens already in slot `slot` (prefill from the saved state, or a decode
  // step when the slot has tokens and ids.size() == 1) and returns f32 logits: [T, vocab] when
  // all_logits, else [1, vocab] of the last position.
  std::vector<float> forward(Sequences& seqs, int64_t slot, const std::vector<int32_t>& ids,
                             bool all_logits);
  std::vector<float> forward(Sequence& seq, const std::vector<int32_t>& ids, bool all_logits) {
    return forward(seq, 0, ids, all_logits);
  }
  // One decode step of N sequences in one forward: ids[n] follows the tokens of slot slots[n]
  // (distinct slots, each with at least one token). Returns [N, vocab] f32 logits. On CUDA with
  // graphs on, the step is replayed from a CUDA graph (captured on the second step of a batch
  // size; the first runs eagerly and sizes every scratch buffer).
  std::vector<float> decode(Sequences& seqs, const std::vector<int64_t>& slots,
                            const std::vector<int32_t>& ids);
  // decode(), then each row's greedy choice on the device (the argmax op): N ids instead of N
  // rows of logits through the host. -1 marks a row Sampler refuses (a NaN or +inf, or only -inf).
  std::vector<int32_t> decode_argmax(Sequences& seqs, const std::vector<int64_t>& slots,
                                     const std::vector<int32_t>& ids, const Penalty& penalty = {});
  // One decode step's k best candidates of each row (the top_k op on the logits, on the device):
  // ids and values [N, k] row-major, larger value first, the lower id first among equal values.
  // Only N·k ids and values come to the host. 1 <= k <= vocab.
  struct Candidates {
    std::vector<int32_t> ids;
    std::vector<float> values;
  };
  Candidates decode_top_k(Sequences& seqs, const std::vector<int64_t>& slots,
                          const std::vector<int32_t>& ids, int64_t k, const Penalty& penalty = {});
  // One top-p decode step's evidence on the device: each row's k best candidates (the top_k op,
  // as decode_top_k) and its softmax mass at `temperature` (the softmax_mass op), after the
  // repetition penalty. Sampler::sample_nucleus decides a row from them when its nucleus lies
  // within the k; otherwise logits_row(n) downloads that row of this step's (penalised) logits,
  // which stay on the device until the next forward.
  struct Nucleus {
    Candidates top;
    std::vector<double> mass;  // [N]
  };
  Nucleus decode_top_p(Sequences& seqs, const std::vector<int64_t>& slots,
                       const std::vector<int32_t>& ids, int64_t k, float temperature,
                       const Penalty& penalty = {});
  std::vector<float> logits_row(int64_t n);
  // One decode step's draws on the device (the sample_rows op: temperature and min-p over the
  // whole row, Sampler's rule): draws[n] is row n's 53-bit draw (Sampler::draw53). N ids come to
  // the host; -1 marks a row Sampler refuses (a NaN or +inf, or only -inf).
  std::vector<int32_t> decode_sample(Sequences& seqs, const std::vector<int64_t>& slots,
                                     const std::vector<int32_t>& ids,
                                     const std::vector<int64_t>& draws, float temperature,
                                     float min_p, const Penalty& penalty = {});

  // CUDA graphs for decode() (default on; no effect on the CPU).
  void set_cuda_graphs(bool on);
  bool cuda_graphs() const { return graphs_on_; }
  // Graph replays and captures so far (tests and benchmarks).
  int64_t graph_replays() const { return graph_replays_; }
  int64_t graph_captures() const { return graph_captures_; }
  // The workspace (tests check that it is sized up front and never grows inside a forward).
  const Workspace& workspace() const { return ws_; }
  // Bytes the workspace needs for a forward of T tokens of N sequences (rows of logits: `rows`).
  size_t workspace_bytes(int64_t T, int64_t N, int64_t pages, int64_t rows) const;

 private:
  void load_weights(const Checkpoint& ckpt, const ModelSpec& spec, int64_t total_bytes,
                    const std::function<void(int64_t, int64_t)>& progress);
  // The varlen arguments of one forward call, made once for all layers: T new tokens of N
  // sequences; decode = one token per sequence after a prefix. All views into the workspace,
  // filled by one host-to-device copy of `staging_`.
  struct Step {
    int64_t T = 0, N = 0;
    bool decode = false;
    Tensor ids;         // i32 [T]
    Tensor slots;       // i32 [N]
    Tensor cu;          // i32 [N + 1]
    Tensor has_init;    // i32 [N]: 1 when the sequence has a prefix
    Tensor positions;   // i32 [T]
    Tensor seq_lens;    // i32 [N]: length + new tokens
    Tensor page_table;  // i32 [N, pages]
    Tensor zeros;       // i32 [T] = 0 (the shared expert's id)
    Tensor ones;        // f32 [T] = 1 (the shared expert's weight)
  };
  // Lays the step's integers out in the workspace (the first allocation after reset) and copies
  // them up. pieces: (slot, tokens) per sequence.
  Step make_step(const Sequences& seqs, const std::vector<int64_t>& slots,
                 const std::vector<std::vector<int32_t>>& pieces);
  void upload_step();  // staging_ -> the step's workspace bytes, asynchronously
  // Embedding, layers, final norm and LM head: logits [rows, vocab] in the workspace, rows = the
  // last `rows` tokens.
  Tensor run_layers(Sequences& seqs, const Step& s, int64_t rows);
  // The depthwise causal conv + SiLU of the GDN and Mamba-2 mixers, resuming from conv_state.
  void conv_silu(const LayerWeights& w, const Tensor& x, const Tensor& conv_state, const Step& s,
                 const Tensor& out);
  void gdn_layer(const LayerWeights& w, Sequences& seqs, size_t layer, const Tensor& x,
                 const Tensor& out, const Step& s);
  void attention_layer(const LayerWeights& w, Sequences& seqs, size_t layer, const Tensor& x,
                       const Tensor& out, const Step& s);
  void mamba_layer(const LayerWeights& w, Sequences& seqs, size_t layer, const Tensor& x,
                   const Tensor& out, const Step& s);
  void mlp(const LayerWeights& w, const Tensor& x, const Tensor& out, int64_t T);
  void moe(const LayerWeights& w, const Tensor& x, const Tensor& out, const Step& s);
  void check_ids(const Sequences& seqs, int64_t slot, const std::vector<int32_t>& ids) const;

  Tensor scratch(DType dtype, const std::vector<int64_t>& shape) { return ws_.take(dtype, shape); }
  OwnedTensor floats(const std::vector<float>& values, const std::vector<int64_t>& shape) const;
  // decode()'s step: the [N, vocab] f32 logits on the device (a view into the workspace, valid
  // until the next forward), the slots' lengths advanced.
  Tensor decode_step(Sequences& seqs, const std::vector<int64_t>& slots,
                     const std::vector<int32_t>& ids);
  std::vector<float> download(const Tensor& t);  // contiguous f32 tensor -> host
  void download_into(void* host, const Tensor& t, size_t bytes);
  Tensor grown(OwnedTensor& buf, DType dtype, int64_t n);
  Candidates candidates_of(const Tensor& logits, int64_t k);  // the top_k op's, downloaded
  // decode_step's logits with the repetition penalty applied in place (nothing when 1); the
  // penalty's id lists are checked before the step runs.
  Tensor penalised_step(Sequences& seqs, const std::vector<int64_t>& slots,
                        const std::vector<int32_t>& ids, const Penalty& penalty);

  Config cfg_;
  Device device_;
  // HYBRID_KEEP_QUANTIZED_EXPERTS=1: MLX-quantized routed experts stay quantized on the device and
  // run through moe_experts_q (read when the model loads).
  bool keep_quantized_experts_ = false;
  DType kv_dtype_ = DType::f32;
  std::unique_ptr<Context> ctx_;
  OwnedTensor embed_, final_norm_, lm_head_;
  // Device buffers of the steps that choose on the device, grown to the largest use (grown()):
  OwnedTensor chosen_ids_;            // [N] i32: decode_argmax's / decode_sample's ids
  OwnedTensor top_ids_, top_values_;  // [N·k] i32 / f32: decode_top_k's candidates
  OwnedTensor draws_;                 // [N] i64: decode_sample's draws
  OwnedTensor masses_;                // [N] f64: decode_top_p's row masses
  Tensor nucleus_logits_;  // decode_top_p's logits (workspace; valid until the next forward)
  OwnedTensor penalty_ids_, penalty_counts_;  // [N·H] / [N] i32: penalised_step()'s inputs
  // download()'s page-locked host buffer on CUDA, grown to the largest download.
  struct PinnedHost {
    void* ptr = nullptr;
    size_t bytes = 0;
    PinnedHost() = default;
    PinnedHost(const PinnedHost&) = delete;
    PinnedHost& operator=(const PinnedHost&) = delete;
    ~PinnedHost();
    void* reserve(size_t n);
  };
  PinnedHost pinned_;
  bool tied_ = false;
  std::vector<LayerWeights> layers_;
  std::vector<int64_t> attn_index_;  // layer -> index into the KV caches (-1: none)
  Workspace ws_;
  std::vector<int32_t> staging_;  // the step's integers on the host (alive until the next step)
  void* staging_dst_ = nullptr;   // where they go in the workspace
  uint64_t next_sequences_id_ = 1;

  // CUDA graphs of decode(), one per (Sequences id, batch size N).
  struct DecodeGraph {
    uint64_t seqs_id = 0;
    int64_t N = 0;
    bool warm = false;              // an eager step of this shape has run (scratch sized)
    void* exec = nullptr;           // cudaGraphExec_t once captured
    uint64_t ws_generation = 0;     // the workspace buffer it was captured against
    void* ctx_workspace = nullptr;  // the context's scratch buffer it was captured against
    Tensor logits;                  // [N, vocab] in the workspace
  };
  std::vector<DecodeGraph> graphs_;
  bool graphs_on_ = true;
  int64_t graph_replays_ = 0, graph_captures_ = 0;
  void drop_graphs();
};

}  // namespace hybrid::engine
