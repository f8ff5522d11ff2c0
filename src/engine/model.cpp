// Model: the public face of the engine's forward pass (src/engine/runner.h).
#include "hybrid/engine/model.h"

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/runner.h"
#include "hybrid/core/error.h"

namespace hybrid {

namespace {

// argmax with the lowest id on ties.
int32_t argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Python's json may write Infinity / -Infinity / NaN (Mamba2's time_step_limit): outside strings
// they become strings so that a strict JSON parser reads the file.
std::string quote_nonfinite(const std::string& text) {
  std::string out;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      out += c;
      if (c == '\\' && i + 1 < text.size()) {
        out += text[++i];
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') in_string = true;
    bool replaced = false;
    for (const std::string token : {"-Infinity", "Infinity", "NaN"}) {
      if (text.compare(i, token.size(), token) == 0) {
        out += '"' + token + '"';
        i += token.size() - 1;
        replaced = true;
        break;
      }
    }
    if (!replaced) out += c;
  }
  return out;
}

// eos_token_id of one JSON object (int, list of ints or null) appended to `ids`.
void add_eos(const nlohmann::json& j, std::vector<int32_t>& ids) {
  if (!j.is_object()) return;
  auto it = j.find("eos_token_id");
  if (it == j.end() && j.contains("text_config")) return add_eos(j.at("text_config"), ids);
  if (it == j.end()) return;
  std::vector<nlohmann::json> values;
  if (it->is_array()) {
    values.assign(it->begin(), it->end());
  } else {
    values.push_back(*it);
  }
  for (const nlohmann::json& v : values) {
    if (!v.is_number_integer()) continue;
    const int32_t id = v.get<int32_t>();
    if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
  }
}

}  // namespace

std::vector<int32_t> eos_token_ids(const std::string& dir) {
  std::vector<int32_t> ids;
  for (const char* name : {"config.json", "generation_config.json"}) {
    const std::filesystem::path path = std::filesystem::path(dir) / name;
    std::ifstream f(path);
    if (!f) continue;
    std::stringstream text;
    text << f.rdbuf();
    const nlohmann::json j = nlohmann::json::parse(quote_nonfinite(text.str()), nullptr, false);
    if (j.is_discarded()) fail("[model] ", path.string(), ": not valid JSON");
    add_eos(j, ids);
  }
  return ids;
}

Model::Model(std::unique_ptr<engine::Runner> runner) : runner_(std::move(runner)) {}
Model::~Model() = default;

std::unique_ptr<Model> Model::load(const std::string& dir, Device device,
                                   const LoadProgress& progress) {
  return std::unique_ptr<Model>(new Model(std::make_unique<engine::Runner>(dir, device, progress)));
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

int64_t Model::max_context() const {
  return runner_->config().max_position_embeddings;
}

GenerateResult Model::generate(const std::vector<int32_t>& prompt, const GenerateOptions& o) {
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  if (prompt.empty()) fail("[model] generate: the prompt is empty");
  if (o.max_new_tokens < 0)
    fail("[model] generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  if (o.prefill_chunk <= 0)
    fail("[model] generate: prefill_chunk must be positive, got ", o.prefill_chunk);
  if (o.capacity < 0) fail("[model] generate: capacity must be >= 0, got ", o.capacity);
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t capacity = o.capacity > 0 ? o.capacity : P + std::max<int64_t>(o.max_new_tokens, 1);
  if (P > capacity)
    fail("[model] generate: the prompt has ", P, " tokens, more than the sequence holds (",
         capacity, ")");
  Sampler sampler(o.sampling);
  const int64_t vocab = vocab_size();
  for (size_t t = 0; t < prompt.size(); ++t)
    if (prompt[t] < 0 || prompt[t] >= vocab)
      fail("[model] token id ", prompt[t], " at position ", t, " is out of range [0, ", vocab, ")");

  GenerateResult r;
  r.prompt_tokens = P;
  engine::Sequence seq = runner_->new_sequence(capacity);
  std::vector<float> last;
  const clock::time_point t0 = clock::now();
  for (int64_t off = 0; off < P; off += o.prefill_chunk) {
    const int64_t len = std::min(o.prefill_chunk, P - off);
    last = runner_->forward(
        seq, std::vector<int32_t>(prompt.begin() + off, prompt.begin() + off + len), false);
    if (o.on_prefill) o.on_prefill(off + len, P);
  }
  const clock::time_point t1 = clock::now();
  r.prefill_seconds = seconds(t0, t1);

  std::vector<int32_t> history = prompt;
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    if (i > 0) {
      if (seq.length >= capacity) {
        r.context_full = true;
        break;
      }
      last = runner_->forward(seq, {r.ids.back()}, false);
      ++r.decode_steps;
    }
    const int32_t next = sampler.sample(last.data(), vocab, history);
    history.push_back(next);
    r.ids.push_back(next);
    if (o.on_token && !o.on_token(next)) break;
  }
  r.decode_seconds = seconds(t1, clock::now());
  return r;
}

}  // namespace hybrid
