// The engine's model: a checkpoint folder loaded onto a device, run over one sequence or a batch.
//
//   auto m = Model::load("path/to/model", Device::cpu());
//   std::vector<float> l = m->logits({1, 2, 3});            // [3, vocab] row-major f32
//   std::vector<int32_t> ids = m->generate_greedy({1, 2, 3}, 16);
//   std::vector<GenerateResult> r = m->generate_batch({{1, 2, 3}, {4, 5}}, options);
//
// Supported architectures: qwen3_next, qwen3_5, qwen3_5_moe, mamba2, nemotron_h with float
// weights (bf16 / f16 / f32); activations, recurrent states and the KV cache are f32.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/device.h"
#include "hybrid/engine/sampling.h"

namespace hybrid {

namespace engine {
class Runner;
}

// Model::generate: prefill the prompt in pieces, then sample one token per decode step.
struct GenerateOptions {
  int64_t max_new_tokens = 16;  // >= 0: tokens sampled at most
  // Tokens the sequence's KV cache holds (prompt + new); 0 = prompt + max_new_tokens. Generation
  // stops early (context_full) when the sequence is full.
  int64_t capacity = 0;
  // > 0: prompt tokens per prefill forward call; 0: the device's default (default_prefill_chunk)
  int64_t prefill_chunk = 0;
  SamplingParams sampling = {};  // temperature 0 = greedy (argmax, lowest id on ties)
  // Called after each prefill piece with the prompt tokens done so far and the prompt length.
  std::function<void(int64_t done, int64_t total)> on_prefill = {};
  // Called with each sampled id, in order; returning false stops generation (EOS, stop string).
  std::function<bool(int32_t id)> on_token = {};
};

struct GenerateResult {
  std::vector<int32_t> ids;  // the sampled ids (prompt not included)
  int64_t prompt_tokens = 0;
  double prefill_seconds = 0;  // the prefill forward calls (wall clock, device synchronised)
  int64_t decode_steps = 0;    // decode forward calls (one per sampled id after the first)
  double decode_seconds = 0;   // the decode forward calls and the sampling of their ids
  bool context_full = false;   // stopped because the sequence held `capacity` tokens
};

// The end-of-sequence ids of the model folder `dir`: eos_token_id (an int or a list) of
// config.json (or its text_config) and of generation_config.json, merged, in order, without
// duplicates. Missing files or fields give no ids.
std::vector<int32_t> eos_token_ids(const std::string& dir);

class Model {
 public:
  // Loads config.json + *.safetensors (+ tokenizer.json when present) from `dir` onto `device`.
  // Errors (hybrid::Error) name what was wrong: missing folder, no config.json, unknown
  // model_type, missing / wrong-shaped tensor, weights larger than the device's memory.
  // `progress`, when given, is called as the weights are read: checkpoint bytes so far and their
  // total (the last call has done == total).
  using LoadProgress = std::function<void(int64_t done_bytes, int64_t total_bytes)>;
  static std::unique_ptr<Model> load(const std::string& dir, Device device,
                                     const LoadProgress& progress = {});
  int64_t vocab_size() const;
  // f32 logits of every position of one sequence run from an empty state: [T, vocab] row-major.
  // ids out of range are an error naming the position.
  std::vector<float> logits(const std::vector<int32_t>& ids);
  // Greedy continuation: the prompt, then `n` tokens chosen by argmax (ties: lowest id), with
  // prefill in pieces of at most `prefill_chunk` tokens (0: default_prefill_chunk) and one decode
  // step per new token.
  std::vector<int32_t> generate_greedy(const std::vector<int32_t>& prompt, int64_t n,
                                       int64_t prefill_chunk = 0);
  // Prompt tokens per prefill forward call when none is asked for: 512 on the CPU, 4096 on CUDA
  // (on the H200 a Qwen3-Next MoE layer reads all 512 experts' weights once per piece; a 4096-token
  // prompt ran at 84K tokens/s in pieces of 512, 210K in 2048 and 283K in one piece).
  int64_t default_prefill_chunk() const;
  // The prefill piece a `prefill_chunk` option asks for: itself when > 0, default_prefill_chunk()
  // when 0; negative is an error naming it.
  int64_t prefill_piece(int64_t prefill_chunk) const;
  // Sampled continuation of `prompt` (see GenerateOptions); the repetition penalty sees the prompt
  // and the ids sampled so far. Errors: empty prompt, a prompt longer than the capacity, ids out of
  // range, bad sampling parameters.
  GenerateResult generate(const std::vector<int32_t>& prompt, const GenerateOptions& options);
  // Several prompts at once: each is prefilled on its own (in pieces of prefill_chunk), then every
  // decode step is ONE forward over all sequences still generating (each with its own state slot,
  // KV pages and position); a sequence that stops (max_new_tokens, on_token false, capacity)
  // drops out of the next steps. One GenerateResult per prompt, in order; with greedy sampling
  // each equals generate() of that prompt alone. options.on_token / on_prefill are not called;
  // on_token(index, id) is, with the prompt's index (false stops that sequence). capacity is
  // per sequence (0 = its prompt + max_new_tokens). Each sequence has its own Sampler seeded with
  // sampling.seed + index. decode_seconds is the wall time of the whole batched decode.
  std::vector<GenerateResult> generate_batch(
      const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& options,
      const std::function<bool(size_t index, int32_t id)>& on_token = {});
  // CUDA graphs for the decode step (default on; no effect on the CPU). See docs/ENGINE.md.
  void set_cuda_graphs(bool on);
  // The model's context length (config.json max_position_embeddings); 0 when the config has none.
  int64_t max_context() const;
  virtual ~Model();

  // The forward pass itself (src/engine/runner.h), for tests and tools that drive sequences.
  engine::Runner& runner() { return *runner_; }

 private:
  explicit Model(std::unique_ptr<engine::Runner> runner);
  std::unique_ptr<engine::Runner> runner_;
};

}  // namespace hybrid
