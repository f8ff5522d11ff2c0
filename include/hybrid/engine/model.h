// The engine's model: a checkpoint folder loaded onto a device, run over one sequence at a time.
//
//   auto m = Model::load("path/to/model", Device::cpu());
//   std::vector<float> l = m->logits({1, 2, 3});            // [3, vocab] row-major f32
//   std::vector<int32_t> ids = m->generate_greedy({1, 2, 3}, 16);
//
// Supported architectures: qwen3_next, qwen3_5, qwen3_5_moe, mamba2, nemotron_h with float
// weights (bf16 / f16 / f32); activations, recurrent states and the KV cache are f32.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/device.h"

namespace hybrid {

namespace engine {
class Runner;
}

class Model {
 public:
  // Loads config.json + *.safetensors (+ tokenizer.json when present) from `dir` onto `device`.
  // Errors (hybrid::Error) name what was wrong: missing folder, no config.json, unknown
  // model_type, missing / wrong-shaped tensor, weights larger than the device's memory.
  static std::unique_ptr<Model> load(const std::string& dir, Device device);
  int64_t vocab_size() const;
  // f32 logits of every position of one sequence run from an empty state: [T, vocab] row-major.
  // ids out of range are an error naming the position.
  std::vector<float> logits(const std::vector<int32_t>& ids);
  // Greedy continuation: the prompt, then `n` tokens chosen by argmax (ties: lowest id), with
  // prefill in pieces of at most `prefill_chunk` tokens and one decode step per new token.
  std::vector<int32_t> generate_greedy(const std::vector<int32_t>& prompt, int64_t n,
                                       int64_t prefill_chunk = 512);
  virtual ~Model();

  // The forward pass itself (src/engine/runner.h), for tests and tools that drive sequences.
  engine::Runner& runner() { return *runner_; }

 private:
  explicit Model(std::unique_ptr<engine::Runner> runner);
  std::unique_ptr<engine::Runner> runner_;
};

}  // namespace hybrid
