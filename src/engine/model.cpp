// Model: the public face of the engine's forward pass (src/engine/runner.h).
#include "hybrid/engine/model.h"

#include <algorithm>

#include "engine/runner.h"
#include "hybrid/core/error.h"

namespace hybrid {

namespace {

// argmax with the lowest id on ties.
int32_t argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

}  // namespace

Model::Model(std::unique_ptr<engine::Runner> runner) : runner_(std::move(runner)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& dir, Device device) {
  return std::unique_ptr<Model>(new Model(std::make_unique<engine::Runner>(dir, device)));
}

int64_t Model::vocab_size() const {
  return runner_->config().vocab_size;
}

std::vector<float> Model::logits(const std::vector<int32_t>& ids) {
  if (ids.empty()) fail("[model] logits: no token ids");
  engine::Sequence seq = runner_->new_sequence(static_cast<int64_t>(ids.size()));
  return runner_->forward(seq, ids, true);
}

std::vector<int32_t> Model::generate_greedy(const std::vector<int32_t>& prompt, int64_t n,
                                            int64_t prefill_chunk) {
  if (prompt.empty()) fail("[model] generate: the prompt is empty");
  if (n < 0) fail("[model] generate: n must be >= 0, got ", n);
  if (prefill_chunk <= 0)
    fail("[model] generate: prefill_chunk must be positive, got ", prefill_chunk);
  const int64_t P = static_cast<int64_t>(prompt.size());
  engine::Sequence seq = runner_->new_sequence(P + std::max<int64_t>(n, 1));
  std::vector<float> last;
  for (int64_t off = 0; off < P; off += prefill_chunk) {
    const int64_t len = std::min(prefill_chunk, P - off);
    last = runner_->forward(
        seq, std::vector<int32_t>(prompt.begin() + off, prompt.begin() + off + len), false);
  }
  std::vector<int32_t> out = prompt;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t next = argmax(last);
    out.push_back(next);
    if (i + 1 < n) last = runner_->forward(seq, {next}, false);
  }
  return out;
}

}  // namespace hybrid
