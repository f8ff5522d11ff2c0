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

// The sampler's total order on ids by their (penalised) logit z: larger first, lower id first
// among equal logits.
struct MoreProbable {
  const float* z;
  bool operator()(int32_t a, int32_t b) const { return z[a] > z[b] || (z[a] == z[b] && a < b); }
};

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

}  // namespace

Sampler::Sampler(const SamplingParams& params) : params_(params), rng_(params.seed) {
  validate(params_);
}

// The penalised logits z (logits itself without a penalty, else a copy in kept.z with the penalty
// applied once to each distinct id of the history, HF RepetitionPenaltyLogitsProcessor / llama.cpp:
// z = l > 0 ? l / penalty : l · penalty), checked in the same pass that finds the first maximum.
// Then the kept ids in ascending order with w = exp((z − max z) / T): the most probable id has
// w = 1, probabilities are w / Σw. Each step is one pass over the vocab or over the ids still in
// the running; the buffers of `kept` are reused from call to call (sample() keeps one).
void Sampler::keep(const float* logits, int64_t vocab, std::span<const int32_t> history, Kept& kept,
                   double row_mass) const {
  kept.short_of_nucleus = false;
  if (logits == nullptr) fail("[sampling] logits: null pointer");
  if (vocab < 1 || vocab > std::numeric_limits<int32_t>::max())
    fail("[sampling] vocab: expected in [1, 2^31), got ", vocab);
  const float penalty = params_.repetition_penalty;
  for (size_t j = 0; j < history.size(); ++j)
    if (history[j] < 0 || history[j] >= vocab)
      fail("[sampling] history: id ", history[j], " at position ", j, " outside [0, vocab=", vocab,
           ")");
  const float* z = logits;
  if (penalty != 1.0f && !history.empty()) {
    kept.z.assign(logits, logits + vocab);
    kept.seen.assign(static_cast<size_t>(vocab), 0);
    for (const int32_t id : history) {
      if (kept.seen[id]) continue;
      kept.seen[id] = 1;
      float& v = kept.z[id];
      // NaN / +inf stay as they are and fail below.
      v = v > 0 ? v / penalty : v * penalty;
    }
    z = kept.z.data();
  }
  // One pass: NaN / +inf are errors; the first maximum; how many are finite.
  constexpr float kInf = std::numeric_limits<float>::infinity();
  int64_t best = -1, finite = 0;
  float zmax = -kInf;
  for (int64_t i = 0; i < vocab; ++i) {
    const float v = z[i];
    if (std::isnan(v)) fail("[sampling] logits: NaN at id ", i);
    if (v == kInf) fail("[sampling] logits: +inf at id ", i);
    if (v != -kInf) {
      ++finite;
      if (v > zmax) zmax = v, best = i;
    }
  }
  if (finite == 0) fail("[sampling] logits: every one of the ", vocab, " logits is -inf");
  kept.ids.clear();
  kept.w.clear();
  if (params_.temperature == 0.0f) {  // greedy: the first maximum, so the lowest id on ties
    kept.ids.push_back(static_cast<int32_t>(best));
    kept.w.push_back(1.0);
    return;
  }

  // Top-k: exactly the k most probable (llama.cpp keeps k; HF and vLLM also keep ids tied with the
  // k-th, this keeps the lower ids among them, so top_k = 1 is the greedy choice). Temperature
  // does not change the order, so this runs on the logits, before any exp: a heap of the k best
  // so far, whose root (the least probable of them) each later id must beat.
  const MoreProbable more{z};
  if (params_.top_k > 0 && params_.top_k < finite) {
    const auto k = static_cast<size_t>(params_.top_k);
    kept.ids.reserve(k);
    for (int32_t i = 0; i < static_cast<int32_t>(vocab); ++i) {
      if (z[i] == -kInf) continue;
      if (kept.ids.size() < k) {
        kept.ids.push_back(i);
        std::push_heap(kept.ids.begin(), kept.ids.end(), more);
      } else if (more(i, kept.ids.front())) {
        std::pop_heap(kept.ids.begin(), kept.ids.end(), more);
        kept.ids.back() = i;
        std::push_heap(kept.ids.begin(), kept.ids.end(), more);
      }
    }
    std::sort(kept.ids.begin(), kept.ids.end());
  }

  // Temperature: w = exp((z − max z) / T), the softmax of z / T up to its normaliser (the max
  // survives top-k, so it has w = 1). Ids whose weight underflows to 0 can never be drawn and
  // leave the running, and so do the -inf ids (exp(-inf) = 0). Without top-k every id is in the
  // running: w over the whole vocab first, then the ids with w > 0 in the same buffer.
  const double temperature = params_.temperature;
  size_t n = 0;
  if (!kept.ids.empty()) {
    kept.w.resize(kept.ids.size());
    for (size_t j = 0; j < kept.ids.size(); ++j) {
      const double w = std::exp((static_cast<double>(z[kept.ids[j]]) - zmax) / temperature);
      kept.ids[n] = kept.ids[j];
      kept.w[n] = w;
      n += w > 0;
    }
  } else {
    kept.w.resize(static_cast<size_t>(vocab));
    double* w = kept.w.data();
    // With min-p and no top-p, an id whose (z − max z) / T lies clearly below ln(min_p) would be
    // dropped by min-p (w < min_p) and no filter before it reads its w: it skips the exp (most of
    // a 150k vocab at a typical min_p). The 1e-6 margin is far above exp's rounding.
    const bool min_p_only = params_.min_p > 0.0f && params_.top_p >= 1.0f;
    const double z_floor =
        min_p_only ? zmax + temperature * (std::log(static_cast<double>(params_.min_p)) - 1e-6)
                   : -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < vocab; ++i)
      w[i] = z[i] >= z_floor ? std::exp((static_cast<double>(z[i]) - zmax) / temperature) : 0.0;
    kept.ids.resize(static_cast<size_t>(vocab));
    for (int64_t i = 0; i < vocab; ++i) {
      kept.ids[n] = static_cast<int32_t>(i);
      w[n] = w[i];
      n += w[i] > 0;
    }
  }
  kept.ids.resize(n);
  kept.w.resize(n);

  // Top-p over the top-k distribution renormalised (HF, vLLM, llama.cpp all renormalise first):
  // walking ids from the most probable, keep an id while the mass before it is < p · Σw. The first
  // id always stays. The nucleus is usually a few ids of a vocab of 150k, so the sorted prefix is
  // grown lazily (partial_sort over the first c ids costs n log c): 64, then 1024. A nucleus past
  // that (a flat distribution: high temperature, an untrained model) is found by selection
  // instead: nth_element halves the range that holds the cut, the upper half's mass decides which
  // half, and the last 1024 positions are sorted and walked. (That mass is summed per half, not
  // id by id in sorted order: the same sum rounded differently, ~1e-16 relative, which moves the
  // cut only when p · Σw lies that close to a prefix sum.) Session 13 measured 44 ms a token on
  // the random-weight model's 152k rows with the lazy sort alone; this is O(n).
  if (params_.top_p < 1.0f) {
    // The mass top-p measures against: the kept weights' sum, or the caller's row_mass when these
    // ids are only the most probable ones of a longer row (sample_nucleus).
    double total = 0;
    for (const double w : kept.w) total += w;
    if (row_mass > 0) total = row_mass;
    const double threshold = static_cast<double>(params_.top_p) * total;
    // (z, position) pairs: positions ascend with the ids, so they break ties as the ids do.
    std::vector<Kept::ZPos>& pos = kept.order;
    pos.resize(n);
    for (size_t j = 0; j < n; ++j) pos[j] = {z[kept.ids[j]], static_cast<int32_t>(j)};
    auto before_pos = [](const Kept::ZPos& a, const Kept::ZPos& b) {
      return a.z > b.z || (a.z == b.z && a.pos < b.pos);
    };
    auto at = [&pos](size_t i) { return pos.begin() + static_cast<std::ptrdiff_t>(i); };
    constexpr size_t kWalk = 1024;  // positions sorted and walked one by one at the end
    // The cut lies in [lo, hi): pos[0, lo) are the lo most probable ids, in order when lo <= 1024,
    // and `before` is their mass.
    size_t lo = 0, hi = n, keep_n = n;
    double before = 0;
    bool cut = false;
    auto walk = [&](size_t end) {  // pos[lo, end) in order: advance lo until the mass reaches p
      for (; lo < end; ++lo) {
        if (before >= threshold) {
          keep_n = lo;
          cut = true;
          return;
        }
        before += kept.w[pos[lo].pos];
      }
    };
    for (size_t sorted : {std::min<size_t>(n, 64), std::min(n, kWalk)}) {
      std::partial_sort(at(lo), at(sorted), at(n), before_pos);
      walk(sorted);
      if (cut || sorted == n) break;
    }
    if (!cut && lo < n) {
      while (hi - lo > kWalk) {
        const size_t mid = lo + (hi - lo) / 2;
        std::nth_element(at(lo), at(mid), at(hi), before_pos);
        double upper = 0;  // the mass of pos[lo, mid): the ids ranked lo .. mid - 1
        for (size_t i = lo; i < mid; ++i) upper += kept.w[pos[i].pos];
        if (before + upper >= threshold) {
          hi = mid;  // the cut is at or before mid
        } else {
          before += upper;
          lo = mid;
        }
      }
      std::sort(at(lo), at(hi), before_pos);
      walk(hi);
      if (!cut) keep_n = hi;
    }
    // Every id walked and the mass still short of p · row_mass: the nucleus reaches past them.
    kept.short_of_nucleus = row_mass > 0 && !cut && lo == n && before < threshold;
    // Back to id order: mark the kept positions, then compact ids and w in place (O(n), where a
    // sort of the kept positions would cost n log n on a wide nucleus).
    std::vector<uint8_t>& mark = kept.mark;
    mark.assign(n, 0);
    for (size_t j = 0; j < keep_n; ++j) mark[static_cast<size_t>(pos[j].pos)] = 1;
    size_t m = 0;
    for (size_t j = 0; j < n; ++j) {
      if (!mark[j]) continue;
      kept.ids[m] = kept.ids[j];
      kept.w[m] = kept.w[j];
      ++m;
    }
    kept.ids.resize(keep_n);
    kept.w.resize(keep_n);
    n = keep_n;
  }

  // Min-p (vLLM, llama.cpp): keep p >= min_p · p_max, i.e. w >= min_p as p_max has w = 1. The
  // most probable id survives every filter above, so the kept set is never empty. Min-p keeps a
  // most-probable prefix, as top-k and top-p do, so its place among them only matters through the
  // renormalisation top-p sees, which is why it runs after top-p here.
  if (params_.min_p > 0.0f) {
    const double min_p = params_.min_p;
    size_t m = 0;
    for (size_t j = 0; j < n; ++j) {
      kept.ids[m] = kept.ids[j];
      kept.w[m] = kept.w[j];
      m += kept.w[j] >= min_p;
    }
    kept.ids.resize(m);
    kept.w.resize(m);
  }
}

std::vector<Sampler::Candidate> Sampler::candidates(const float* logits, int64_t vocab,
                                                    std::span<const int32_t> history) const {
  Kept kept;
  keep(logits, vocab, history, kept);
  double total = 0;
  for (const double w : kept.w) total += w;
  std::vector<Candidate> out;
  out.reserve(kept.ids.size());
  for (size_t j = 0; j < kept.ids.size(); ++j) out.push_back({kept.ids[j], kept.w[j] / total});
  return out;
}

int32_t Sampler::sample(const float* logits, int64_t vocab, std::span<const int32_t> history) {
  keep(logits, vocab, history, scratch_);
  if (params_.temperature == 0.0f) return scratch_.ids.front();
  return draw(scratch_);
}

int64_t Sampler::sample_nucleus(const float* z, int64_t n, double row_mass) {
  if (params_.temperature == 0.0f || params_.top_p >= 1.0f)
    fail("[sampling] sample_nucleus: needs temperature > 0 and top_p < 1, got temperature ",
         params_.temperature, ", top_p ", params_.top_p);
  if (!(std::isfinite(row_mass) && row_mass >= 1.0))
    fail("[sampling] sample_nucleus: row_mass must be finite and >= 1 (the max has weight 1), got ",
         row_mass);
  keep(z, n, {}, scratch_, row_mass);
  if (scratch_.short_of_nucleus) return -1;
  return draw(scratch_);
}

// Inverse CDF over the kept ids in ascending id order: the first id whose cumulative probability
// (w / Σw, as candidates() gives it) exceeds u. Rounding can leave the last sum a hair under 1: u
// beyond it is the last id's. One draw of the generator.
int32_t Sampler::draw(const Kept& kept) {
  double total = 0;
  for (const double w : kept.w) total += w;
  const double u = rng_.uniform();
  double cumulative = 0;
  for (size_t j = 0; j < kept.ids.size(); ++j) {
    cumulative += kept.w[j] / total;
    if (u < cumulative) return kept.ids[j];
  }
  return kept.ids.back();
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
