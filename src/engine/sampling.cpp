#include "hybrid/engine/sampling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "hybrid/core/error.h"

namespace hybrid {

// ---- generator --------------------------------------------------------------------------------

// splitmix64 (Vigna, public domain reference): state += golden gamma, then a 64-bit mix.
uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

Xoshiro256::Xoshiro256(uint64_t seed) {
  // The seeding the xoshiro authors recommend: four splitmix64 outputs (never all zero).
  uint64_t state = seed;
  for (uint64_t& s : s_) s = splitmix64(state);
}

// xoshiro256** 1.0: result = rotl(s1 · 5, 7) · 9, then the xorshift-rotate state update.
uint64_t Xoshiro256::next() {
  auto rotl = [](uint64_t x, int k) { return (x << k) | (x >> (64 - k)); };
  const uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double Xoshiro256::uniform() {
  return static_cast<double>(next() >> 11) * 0x1.0p-53;
}

// ---- sampler ----------------------------------------------------------------------------------

namespace {

// One id still in the running: its penalised logit z, and w = exp((z - max z) / T) (so the most
// probable id has w = 1 and probabilities are w / Σw).
struct Item {
  float z;
  int32_t id;
  double w;
};

// The sampler's total order: larger logit first, lower id first among equal logits.
bool more_probable(const Item& a, const Item& b) {
  return a.z > b.z || (a.z == b.z && a.id < b.id);
}

void validate(const SamplingParams& p) {
  if (!(std::isfinite(p.temperature) && p.temperature >= 0))
    fail("[sampling] temperature: expected >= 0 (0 = greedy), got ", p.temperature);
  if (p.top_k < 0) fail("[sampling] top_k: expected >= 0 (0 = off), got ", p.top_k);
  if (!(p.top_p > 0 && p.top_p <= 1))
    fail("[sampling] top_p: expected in (0, 1] (1 = off), got ", p.top_p);
  if (!(p.min_p >= 0 && p.min_p < 1))
    fail("[sampling] min_p: expected in [0, 1) (0 = off), got ", p.min_p);
  if (!(std::isfinite(p.repetition_penalty) && p.repetition_penalty > 0))
    fail("[sampling] repetition_penalty: expected > 0 (1 = off), got ", p.repetition_penalty);
}

// The penalised logits: a copy of logits[0, vocab) with the repetition penalty applied once to
// each distinct id of the history (HF RepetitionPenaltyLogitsProcessor, llama.cpp penalties):
//   z = l > 0 ? l / penalty : l · penalty
// Checks the inputs: ids in range, no NaN or +inf, at least one finite logit.
std::vector<float> penalised_logits(const float* logits, int64_t vocab,
                                    std::span<const int32_t> history, float penalty) {
  if (logits == nullptr) fail("[sampling] logits: null pointer");
  if (vocab < 1 || vocab > std::numeric_limits<int32_t>::max())
    fail("[sampling] vocab: expected in [1, 2^31), got ", vocab);
  std::vector<float> z(logits, logits + vocab);
  bool any_finite = false;
  for (int64_t i = 0; i < vocab; ++i) {
    if (std::isnan(z[i])) fail("[sampling] logits: NaN at id ", i);
    if (z[i] == std::numeric_limits<float>::infinity()) fail("[sampling] logits: +inf at id ", i);
    any_finite = any_finite || std::isfinite(z[i]);
  }
  if (!any_finite) fail("[sampling] logits: every one of the ", vocab, " logits is -inf");
  std::vector<bool> seen(penalty != 1.0f ? vocab : 0, false);
  for (size_t j = 0; j < history.size(); ++j) {
    const int32_t id = history[j];
    if (id < 0 || id >= vocab)
      fail("[sampling] history: id ", id, " at position ", j, " outside [0, vocab=", vocab, ")");
    if (penalty == 1.0f || seen[id]) continue;
    seen[id] = true;
    z[id] = z[id] > 0 ? z[id] / penalty : z[id] * penalty;
  }
  return z;
}

}  // namespace

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  validate(params_);
}

std::vector<Sampler::Candidate> Sampler::candidates(const float* logits, int64_t vocab,
                                                    std::span<const int32_t> history) const {
  const std::vector<float> z = penalised_logits(logits, vocab, history, params_.repetition_penalty);

  // Greedy: the first maximum, so the lowest id among equal logits.
  if (params_.temperature == 0.0f) {
    const auto best = std::max_element(z.begin(), z.end());
    return {{static_cast<int32_t>(best - z.begin()), 1.0}};
  }

  // Every id with a finite logit is in the running; -inf ids (masked) never are.
  std::vector<Item> items;
  items.reserve(static_cast<size_t>(vocab));
  for (int64_t i = 0; i < vocab; ++i)
    if (std::isfinite(z[i])) items.push_back({z[i], static_cast<int32_t>(i), 0.0});

  // Top-k: exactly the k most probable (llama.cpp keeps k; HF and vLLM also keep ids tied with the
  // k-th, this keeps the lower ids among them, so top_k = 1 is the greedy choice). Temperature
  // does not change the order, so this runs on the logits, before any exp.
  if (params_.top_k > 0 && static_cast<size_t>(params_.top_k) < items.size()) {
    std::nth_element(items.begin(), items.begin() + (params_.top_k - 1), items.end(),
                     more_probable);
    items.resize(static_cast<size_t>(params_.top_k));
    // Back to id order: the sums below run in one order on every standard library.
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.id < b.id; });
  }

  // Temperature: w = exp((z - max z) / T), the softmax of z / T up to its normaliser (the max
  // survives top-k, so it has w = 1). Ids whose weight underflows to 0 can never be drawn and
  // leave the running.
  const double zmax = *std::max_element(z.begin(), z.end());
  const double temperature = params_.temperature;
  for (Item& it : items) it.w = std::exp((static_cast<double>(it.z) - zmax) / temperature);
  std::erase_if(items, [](const Item& it) { return !(it.w > 0); });

  // Top-p over the top-k distribution renormalised (HF, vLLM, llama.cpp all renormalise first):
  // walking ids from the most probable, keep an id while the mass before it is < p · Σw. The first
  // id always stays. The sorted prefix is grown lazily: the nucleus is usually a few ids of a vocab
  // of 150k, and partial_sort over the first c ids costs n log c.
  if (params_.top_p < 1.0f) {
    double total = 0;
    for (const Item& it : items) total += it.w;
    const double threshold = static_cast<double>(params_.top_p) * total;
    size_t sorted = std::min<size_t>(items.size(), 64);
    size_t keep = items.size();
    double before = 0;
    size_t scanned = 0;
    for (;;) {
      std::partial_sort(items.begin() + static_cast<std::ptrdiff_t>(scanned),
                        items.begin() + static_cast<std::ptrdiff_t>(sorted), items.end(),
                        more_probable);
      bool cut = false;
      for (; scanned < sorted; ++scanned) {
        if (before >= threshold) {
          keep = scanned;
          cut = true;
          break;
        }
        before += items[scanned].w;
      }
      if (cut || sorted == items.size()) break;
      sorted = std::min(items.size(), sorted * 4);
    }
    items.resize(keep);
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.id < b.id; });
  }

  // Min-p (vLLM, llama.cpp): keep p >= min_p · p_max, i.e. w >= min_p as p_max has w = 1. The
  // most probable id survives every filter above, so the kept set is never empty. Min-p keeps a
  // most-probable prefix, as top-k and top-p do, so its place among them only matters through the
  // renormalisation top-p sees, which is why it runs after top-p here.
  if (params_.min_p > 0.0f) {
    const double min_p = params_.min_p;
    std::erase_if(items, [&](const Item& it) { return it.w < min_p; });
  }

  double total = 0;
  for (const Item& it : items) total += it.w;
  std::vector<Candidate> out;
  out.reserve(items.size());
  for (const Item& it : items) out.push_back({it.id, it.w / total});
  return out;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, std::span<const int32_t> history) {
  const std::vector<Candidate> kept = candidates(logits, vocab, history);
  if (params_.temperature == 0.0f) return kept.front().id;
  // Inverse CDF over the kept ids in ascending id order: the first id whose cumulative
  // probability exceeds u. Rounding can leave the last sum a hair under 1: u beyond it is the last
  // id's.
  const double u = rng_.uniform();
  double cumulative = 0;
  for (const Candidate& c : kept) {
    cumulative += c.prob;
    if (u < cumulative) return c.id;
  }
  return kept.back().id;
}

// ---- stop conditions --------------------------------------------------------------------------

const char* finish_reason(StopReason reason) {
  switch (reason) {
    case StopReason::eos:
    case StopReason::stop_string:
      return "stop";
    case StopReason::max_tokens:
      return "length";
    case StopReason::none:
      break;
  }
  return "";
}

const char* to_string(StopReason reason) {
  switch (reason) {
    case StopReason::eos:
      return "eos";
    case StopReason::stop_string:
      return "stop_string";
    case StopReason::max_tokens:
      return "max_tokens";
    case StopReason::none:
      break;
  }
  return "none";
}

StopChecker::StopChecker(StopParams params) : params_(std::move(params)) {
  for (size_t i = 0; i < params_.stop_strings.size(); ++i)
    if (params_.stop_strings[i].empty()) fail("[stop] stop_strings[", i, "]: empty string");
  if (params_.max_tokens < 0)
    fail("[stop] max_tokens: expected >= 0 (0 = no limit), got ", params_.max_tokens);
}

bool StopChecker::cut_at_stop_string() {
  size_t best = std::string::npos;
  const std::string* match = nullptr;
  for (const std::string& s : params_.stop_strings) {
    const size_t pos = held_.find(s);
    if (pos < best) {
      best = pos;
      match = &s;
    }
  }
  if (match == nullptr) return false;
  held_.resize(best);
  matched_ = *match;
  return true;
}

size_t StopChecker::holdback() const {
  size_t longest = 0;
  for (const std::string& s : params_.stop_strings) {
    const std::string_view held(held_);
    for (size_t len = std::min(s.size() - 1, held.size()); len > longest; --len) {
      if (held.substr(held.size() - len) == std::string_view(s).substr(0, len)) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

StopChecker::Result StopChecker::push(int32_t id, std::string_view piece) {
  if (finished_) fail("[stop] push: the stream was finished");
  if (stopped()) fail("[stop] push: the stream already stopped (", to_string(reason_), ")");
  ++tokens_;
  Result r;
  if (std::find(params_.eos_ids.begin(), params_.eos_ids.end(), id) != params_.eos_ids.end()) {
    reason_ = StopReason::eos;
  } else {
    held_ += piece;
    if (cut_at_stop_string()) {
      // Everything before the match is final; the match and anything after it are dropped.
      reason_ = StopReason::stop_string;
      r.emit = std::move(held_);
      held_.clear();
      r.stop = true;
      r.reason = reason_;
      return r;
    }
    if (params_.max_tokens > 0 && tokens_ >= params_.max_tokens) reason_ = StopReason::max_tokens;
  }
  // Emit all but the tail that could still begin a stop string (finish() releases it).
  const size_t keep = holdback();
  r.emit = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  r.stop = stopped();
  r.reason = reason_;
  return r;
}

std::string StopChecker::finish(std::string_view tail) {
  if (finished_ || reason_ == StopReason::stop_string) {
    finished_ = true;
    return {};
  }
  finished_ = true;
  held_ += tail;
  if (cut_at_stop_string() && reason_ == StopReason::none) reason_ = StopReason::stop_string;
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace hybrid
