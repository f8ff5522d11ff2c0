// Model: the public face of the engine's forward pass (src/engine/runner.h).
#include "hybrid/engine/model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

#include <nlohmann/json.hpp>

#include "engine/runner.h"
#include "hybrid/core/error.h"
#include "model/json_text.h"

namespace hybrid {

namespace {

// argmax with the lowest id on ties.
int32_t argmax(const std::vector<float>& row) {
  return static_cast<int32_t>(std::max_element(row.begin(), row.end()) - row.begin());
}

// Greedy sampling needs no logits on the host: the decode steps choose on the device
// (Runner::decode_argmax), which saves each step the logits' download (608 KB of f32 at
// Qwen3-Next's vocab) and the host scan. A repetition penalty is applied there first (the
// repetition_penalty op), as Sampler applies it before every other rule.
bool greedy_on_device(const SamplingParams& s) {
  return s.temperature == 0.0f;
}

// The distinct ids of one sequence's history (prompt + output) and the penalty, for the device's
// repetition penalty (Sampler penalises each distinct id once).
struct History {
  float penalty;
  std::vector<char> seen;
  std::vector<int32_t> distinct;
  History(float penalty, int64_t vocab, const std::vector<int32_t>& prompt)
      : penalty(penalty), seen(penalty != 1.0f ? static_cast<size_t>(vocab) : 0, 0) {
    for (const int32_t id : prompt) add(id);
  }
  void add(int32_t id) {
    if (penalty == 1.0f || seen[static_cast<size_t>(id)]) return;
    seen[static_cast<size_t>(id)] = 1;
    distinct.push_back(id);
  }
};

// The step's penalty for the rows of `slots` (histories indexed by slot).
engine::Penalty step_penalty(const std::vector<History>& histories,
                             const std::vector<int64_t>& slots) {
  engine::Penalty p;
  if (histories.empty() || histories.front().penalty == 1.0f) return p;
  p.value = histories.front().penalty;
  for (const int64_t b : slots) p.ids.push_back(histories[static_cast<size_t>(b)].distinct);
  return p;
}

// A device step's chosen ids; -1 (a row with a NaN or +inf, or only -inf) is an error naming the
// slot, as Sampler refuses such logits.
std::vector<int32_t> checked_choice(std::vector<int32_t> next, const std::vector<int64_t>& slots) {
  for (size_t n = 0; n < next.size(); ++n)
    if (next[n] < 0)
      fail("[sampling] logits of slot ", slots[n],
           ": a NaN or +inf, or only -inf (no token to choose)");
  return next;
}

// One decode step's greedy ids.
std::vector<int32_t> greedy_step(engine::Runner& runner, engine::Sequences& seqs,
                                 const std::vector<int64_t>& slots, const std::vector<int32_t>& ids,
                                 const engine::Penalty& penalty = {}) {
  return checked_choice(runner.decode_argmax(seqs, slots, ids, penalty), slots);
}

// Sampled steps with a top-k of at most kDeviceTopK below the vocab take the top_k op on the
// device (after the repetition penalty, when there is one): the host Sampler then draws from the k
// candidates in id order. That is exactly its draw on the whole row: top-k runs first in its chain,
// the max it subtracts is among the candidates, and the rest (temperature, top-p, min-p, the
// inverse CDF in id order) reads only the kept ids (see TopK in hybrid/ops/sampling.h). A step then
// downloads N·k ids and values instead of N rows of logits, and the host reads k values instead of
// the vocab.
constexpr int64_t kDeviceTopK = 1024;  // top_k.cuda's largest k

bool top_k_on_device(const SamplingParams& s, int64_t vocab) {
  return s.temperature > 0.0f && s.top_k > 0 && s.top_k <= kDeviceTopK && s.top_k < vocab;
}

// Sampled steps over the whole row (no top-k, no top-p; min-p and the repetition penalty allowed)
// draw on the device (the sample_rows op, Sampler's rule with the sampler's own next draw): the
// host Sampler would otherwise take an exp of every logit, ~1.8 ms a token at Qwen3-Next's vocab.
bool whole_row_on_device(const SamplingParams& s, int64_t vocab) {
  return s.temperature > 0.0f && (s.top_k == 0 || s.top_k >= vocab) && s.top_p >= 1.0f;
}

// One decode step drawn on the device.
std::vector<int32_t> device_sample_step(engine::Runner& runner, engine::Sequences& seqs,
                                        const std::vector<int64_t>& slots,
                                        const std::vector<int32_t>& ids,
                                        const std::vector<int64_t>& draws, const SamplingParams& s,
                                        const engine::Penalty& penalty) {
  return checked_choice(
      runner.decode_sample(seqs, slots, ids, draws, s.temperature, s.min_p, penalty), slots);
}

// Row n of a decode_top_k / decode_top_p step's candidates in id order (ids are distinct). A NaN
// or +inf among them (they rank first) is an error naming the slot and the id, as Sampler would
// refuse the whole row.
struct IdOrderRow {
  std::vector<int32_t> ids;
  std::vector<float> z;
};
IdOrderRow id_order_row(const engine::Runner::Candidates& c, size_t n, int64_t k, int64_t slot) {
  std::vector<std::pair<int32_t, float>> row(static_cast<size_t>(k));
  for (size_t j = 0; j < row.size(); ++j) {
    row[j] = {c.ids[n * row.size() + j], c.values[n * row.size() + j]};
    if (std::isnan(row[j].second) || row[j].second == std::numeric_limits<float>::infinity())
      fail("[sampling] logits of slot ", slot, ": ", row[j].second, " at id ", row[j].first);
  }
  std::sort(row.begin(), row.end());
  IdOrderRow r;
  for (const auto& [id, z] : row) r.ids.push_back(id), r.z.push_back(z);
  return r;
}

// Row n of a decode_top_k step drawn by `sampler` from its k candidates.
int32_t sample_candidates(Sampler& sampler, const engine::Runner::Candidates& c, size_t n,
                          int64_t k, int64_t slot) {
  const IdOrderRow row = id_order_row(c, n, k, slot);
  return row.ids[static_cast<size_t>(sampler.sample(row.z.data(), k))];
}

// Sampled steps with a top-p and no top-k below the vocab take the top_k op's best
// min(kDeviceTopK, vocab) candidates and the softmax_mass op's row mass (Runner::decode_top_p):
// Sampler::sample_nucleus decides a row from them when its nucleus lies within the candidates
// (sample()'s draw on the whole row, up to the rounding of the mass's sum), and a row whose nucleus
// reaches past them comes down whole (Runner::logits_row) for Sampler. A peaked row (a trained
// model's) then downloads 1024 candidates instead of 608 KB, and the host reads 1024 values.
bool top_p_on_device(const SamplingParams& s, int64_t vocab) {
  return s.temperature > 0.0f && s.top_p < 1.0f && (s.top_k == 0 || s.top_k >= vocab);
}

int32_t sample_nucleus_row(Sampler& sampler, engine::Runner& runner,
                           const engine::Runner::Nucleus& nu, size_t n, int64_t k, int64_t slot,
                           int64_t vocab) {
  const IdOrderRow row = id_order_row(nu.top, n, k, slot);
  if (!(nu.mass[n] >= 1.0))  // NaN: no NaN / +inf among the candidates, so only -inf entries
    fail("[sampling] logits of slot ", slot, ": only -inf (no token to choose)");
  const int64_t j = sampler.sample_nucleus(row.z.data(), k, nu.mass[n]);
  if (j >= 0) return row.ids[static_cast<size_t>(j)];
  const std::vector<float> full = runner.logits_row(static_cast<int64_t>(n));
  return sampler.sample(full.data(), vocab);  // the penalty was applied on the device
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
  const int64_t piece = prefill_piece(prefill_chunk);
  const int64_t P = static_cast<int64_t>(prompt.size());
  engine::Sequence seq = runner_->new_sequence(P + std::max<int64_t>(n, 1));
  std::vector<float> last;
  for (int64_t off = 0; off < P; off += piece) {
    const int64_t len = std::min(piece, P - off);
    last = runner_->forward(
        seq, std::vector<int32_t>(prompt.begin() + off, prompt.begin() + off + len), false);
  }
  std::vector<int32_t> out = prompt;
  int32_t next = argmax(last);
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(next);
    if (i + 1 < n) next = greedy_step(*runner_, seq, {0}, {next})[0];
  }
  return out;
}

int64_t Model::default_prefill_chunk() const {
  return runner_->device().is_cpu() ? 512 : 4096;
}

int64_t Model::prefill_piece(int64_t prefill_chunk) const {
  if (prefill_chunk < 0)
    fail("[model] generate: prefill_chunk must be positive (or 0 for the default), got ",
         prefill_chunk);
  return prefill_chunk > 0 ? prefill_chunk : default_prefill_chunk();
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
  const int64_t piece = prefill_piece(o.prefill_chunk);
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
  for (int64_t off = 0; off < P; off += piece) {
    const int64_t len = std::min(piece, P - off);
    last = runner_->forward(
        seq, std::vector<int32_t>(prompt.begin() + off, prompt.begin() + off + len), false);
    if (o.on_prefill) o.on_prefill(off + len, P);
  }
  const clock::time_point t1 = clock::now();
  r.prefill_seconds = seconds(t0, t1);

  std::vector<int32_t> history = prompt;
  std::vector<History> distinct = {History(o.sampling.repetition_penalty, vocab, prompt)};
  const bool on_device = greedy_on_device(o.sampling);
  for (int64_t i = 0; i < o.max_new_tokens; ++i) {
    int32_t next;
    if (i == 0) {
      next = sampler.sample(last.data(), vocab, history);
    } else {
      if (seq.length[0] >= capacity) {
        r.context_full = true;
        break;
      }
      ++r.decode_steps;
      if (on_device) {
        next = greedy_step(*runner_, seq, {0}, {r.ids.back()}, step_penalty(distinct, {0}))[0];
      } else if (whole_row_on_device(o.sampling, vocab)) {
        next = device_sample_step(*runner_, seq, {0}, {r.ids.back()},
                                  {static_cast<int64_t>(sampler.draw53())}, o.sampling,
                                  step_penalty(distinct, {0}))[0];
      } else if (top_k_on_device(o.sampling, vocab)) {
        const int64_t k = o.sampling.top_k;
        next = sample_candidates(
            sampler,
            runner_->decode_top_k(seq, {0}, {r.ids.back()}, k, step_penalty(distinct, {0})), 0, k,
            0);
      } else if (top_p_on_device(o.sampling, vocab)) {
        const int64_t k = std::min(kDeviceTopK, vocab);
        next = sample_nucleus_row(
            sampler, *runner_,
            runner_->decode_top_p(seq, {0}, {r.ids.back()}, k, o.sampling.temperature,
                                  step_penalty(distinct, {0})),
            0, k, 0, vocab);
      } else {
        last = runner_->decode(seq, {0}, {r.ids.back()});
        next = sampler.sample(last.data(), vocab, history);
      }
    }
    history.push_back(next);
    distinct[0].add(next);
    r.ids.push_back(next);
    if (o.on_token && !o.on_token(next)) break;
  }
  r.decode_seconds = seconds(t1, clock::now());
  return r;
}

std::vector<GenerateResult> Model::generate_batch(
    const std::vector<std::vector<int32_t>>& prompts, const GenerateOptions& o,
    const std::function<bool(size_t index, int32_t id)>& on_token) {
  using clock = std::chrono::steady_clock;
  auto seconds = [](clock::time_point a, clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
  };
  if (prompts.empty()) fail("[model] generate_batch: no prompts");
  if (o.max_new_tokens < 0)
    fail("[model] generate: max_new_tokens must be >= 0, got ", o.max_new_tokens);
  const int64_t piece = prefill_piece(o.prefill_chunk);
  if (o.capacity < 0) fail("[model] generate: capacity must be >= 0, got ", o.capacity);
  const int64_t vocab = vocab_size();
  const size_t B = prompts.size();
  // Every slot holds the longest need (the KV pages are one equal run per slot).
  int64_t capacity = o.capacity;
  for (size_t b = 0; b < B; ++b) {
    const std::vector<int32_t>& prompt = prompts[b];
    if (prompt.empty()) fail("[model] generate: prompt ", b, " is empty");
    const int64_t P = static_cast<int64_t>(prompt.size());
    if (o.capacity > 0 && P > o.capacity)
      fail("[model] generate: prompt ", b, " has ", P, " tokens, more than the sequence holds (",
           o.capacity, ")");
    if (o.capacity == 0) capacity = std::max(capacity, P + std::max<int64_t>(o.max_new_tokens, 1));
    for (size_t t = 0; t < prompt.size(); ++t)
      if (prompt[t] < 0 || prompt[t] >= vocab)
        fail("[model] prompt ", b, ": token id ", prompt[t], " at position ", t,
             " is out of range [0, ", vocab, ")");
  }
  // A sequence's own limit: its prompt + max_new_tokens (as generate() alone), or `capacity`.
  auto limit = [&](size_t b) {
    const int64_t P = static_cast<int64_t>(prompts[b].size());
    return o.capacity > 0 ? o.capacity : P + std::max<int64_t>(o.max_new_tokens, 1);
  };

  std::vector<GenerateResult> results(B);
  std::vector<Sampler> samplers;
  std::vector<std::vector<int32_t>> history(prompts.begin(), prompts.end());
  std::vector<History> distinct;
  for (size_t b = 0; b < B; ++b)
    distinct.emplace_back(o.sampling.repetition_penalty, vocab, prompts[b]);
  for (size_t b = 0; b < B; ++b) {
    SamplingParams sp = o.sampling;
    sp.seed += b;
    samplers.emplace_back(sp);
  }
  engine::Sequences seqs = runner_->new_sequences(static_cast<int64_t>(B), capacity);
  std::vector<int64_t> live;  // slots still generating
  for (size_t b = 0; b < B; ++b) {
    GenerateResult& r = results[b];
    const std::vector<int32_t>& prompt = prompts[b];
    const int64_t P = static_cast<int64_t>(prompt.size());
    r.prompt_tokens = P;
    if (o.max_new_tokens == 0) continue;
    const clock::time_point t0 = clock::now();
    std::vector<float> last;
    for (int64_t off = 0; off < P; off += piece) {
      const int64_t len = std::min(piece, P - off);
      last = runner_->forward(
          seqs, static_cast<int64_t>(b),
          std::vector<int32_t>(prompt.begin() + off, prompt.begin() + off + len), false);
    }
    r.prefill_seconds = seconds(t0, clock::now());
    const int32_t next = samplers[b].sample(last.data(), vocab, history[b]);
    history[b].push_back(next);
    distinct[b].add(next);
    r.ids.push_back(next);
    const bool go_on = !on_token || on_token(b, next);
    if (go_on && static_cast<int64_t>(r.ids.size()) < o.max_new_tokens)
      live.push_back(static_cast<int64_t>(b));
  }

  const clock::time_point t1 = clock::now();
  while (!live.empty()) {
    // Sequences that are full stop here (as generate() alone would, before its next step).
    std::vector<int64_t> step;
    for (int64_t b : live) {
      if (seqs.length[static_cast<size_t>(b)] >= limit(static_cast<size_t>(b))) {
        results[static_cast<size_t>(b)].context_full = true;
      } else {
        step.push_back(b);
      }
    }
    if (step.empty()) break;
    std::vector<int32_t> ids;
    for (int64_t b : step) ids.push_back(results[static_cast<size_t>(b)].ids.back());
    std::vector<float> logits;
    std::vector<int32_t> chosen;
    engine::Runner::Candidates candidates;
    engine::Runner::Nucleus nucleus;
    const bool top_k = top_k_on_device(o.sampling, vocab);
    const bool top_p = !top_k && top_p_on_device(o.sampling, vocab);
    const int64_t nucleus_k = std::min(kDeviceTopK, vocab);
    if (greedy_on_device(o.sampling)) {
      chosen = greedy_step(*runner_, seqs, step, ids, step_penalty(distinct, step));
    } else if (whole_row_on_device(o.sampling, vocab)) {
      std::vector<int64_t> draws;
      for (int64_t b : step)
        draws.push_back(static_cast<int64_t>(samplers[static_cast<size_t>(b)].draw53()));
      chosen = device_sample_step(*runner_, seqs, step, ids, draws, o.sampling,
                                  step_penalty(distinct, step));
    } else if (top_k) {
      candidates =
          runner_->decode_top_k(seqs, step, ids, o.sampling.top_k, step_penalty(distinct, step));
    } else if (top_p) {
      nucleus = runner_->decode_top_p(seqs, step, ids, nucleus_k, o.sampling.temperature,
                                      step_penalty(distinct, step));
    } else {
      logits = runner_->decode(seqs, step, ids);
    }
    live.clear();
    for (size_t n = 0; n < step.size(); ++n) {
      const size_t b = static_cast<size_t>(step[n]);
      GenerateResult& r = results[b];
      ++r.decode_steps;
      const int32_t next =
          !chosen.empty() ? chosen[n]
          : top_k         ? sample_candidates(samplers[b], candidates, n, o.sampling.top_k, step[n])
          : top_p ? sample_nucleus_row(samplers[b], *runner_, nucleus, n, nucleus_k, step[n], vocab)
                  : samplers[b].sample(logits.data() + n * static_cast<size_t>(vocab), vocab,
                                       history[b]);
      history[b].push_back(next);
      distinct[b].add(next);
      r.ids.push_back(next);
      const bool go_on = !on_token || on_token(b, next);
      if (go_on && static_cast<int64_t>(r.ids.size()) < o.max_new_tokens) live.push_back(step[n]);
    }
  }
  const double decode_seconds = seconds(t1, clock::now());
  for (GenerateResult& r : results) r.decode_seconds = decode_seconds;
  return results;
}

void Model::set_cuda_graphs(bool on) {
  runner_->set_cuda_graphs(on);
}

}  // namespace hybrid
