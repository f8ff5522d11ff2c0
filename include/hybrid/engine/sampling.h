// Token sampling and stop conditions for generation. docs/SAMPLING.md has the full semantics and
// which engine each rule follows.
//
//   hybrid::Sampler sampler({.temperature = 0.7f, .top_p = 0.9f, .seed = 42});
//   hybrid::StopChecker stop({.eos_ids = {151645}, .stop_strings = {"\n\n"}, .max_tokens = 256});
//   hybrid::IncrementalDecoder text(tokenizer);
//   for (;;) {
//     int32_t id = sampler.sample(logits, vocab, history);
//     StopChecker::Result r = stop.push(id, text.push(id));
//     print(r.emit);
//     if (r.stop) break;
//   }
//   print(stop.finish(text.flush()));
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hybrid {

// ---- sampling ---------------------------------------------------------------------------------

// Applied in this order (Hugging Face's and vLLM's order):
//   1. repetition penalty on every distinct id of the history: l > 0 ? l / penalty : l · penalty
//   2. temperature: l / T (T = 0: greedy, the argmax of the penalised logits, lowest id on ties)
//   3. top-k: the k most probable ids (exactly k; ties at the boundary go to the lower id)
//   4. top-p: the most probable ids, in order, while the probability mass before an id is < p
//      (renormalised over the top-k set), so at least one id is kept
//   5. min-p: ids with probability >= min_p · (the largest probability)
//   6. a draw from the kept ids, renormalised, with the sampler's own seeded generator.
struct SamplingParams {
  float temperature = 0.0f;         // >= 0; 0 = greedy
  int top_k = 0;                    // >= 0; 0 = off
  float top_p = 1.0f;               // in (0, 1]; 1 = off
  float min_p = 0.0f;               // in [0, 1); 0 = off
  float repetition_penalty = 1.0f;  // > 0; 1 = off
  uint64_t seed = 0;                // seeds the generator (the same seed gives the same draws)
};

// xoshiro256** (Blackman & Vigna) seeded through splitmix64: the same stream on every machine and
// compiler, unlike std::mt19937's distributions whose algorithms the standard leaves open.
class Xoshiro256 {
 public:
  explicit Xoshiro256(uint64_t seed);
  uint64_t next();
  // Uniform in [0, 1): the top 53 bits of next() over 2^53.
  double uniform();

 private:
  uint64_t s_[4];
};

// splitmix64 step (Vigna's reference): advances `state` and returns the next output.
uint64_t splitmix64(uint64_t& state);

class Sampler {
 public:
  // Throws hybrid::Error naming the field when a parameter is out of range.
  explicit Sampler(const SamplingParams& params);

  // An id drawn from logits[0, vocab) after the filters above. `history` holds the ids the
  // repetition penalty applies to (vLLM: prompt + output; llama.cpp: the last n of them); ids must
  // be in [0, vocab). Logits may be -inf (masked); NaN, +inf or all -inf is an error. Advances the
  // generator by exactly one draw when temperature > 0, none when greedy.
  int32_t sample(const float* logits, int64_t vocab, std::span<const int32_t> history = {});

  // The distribution sample() draws from: the kept ids in ascending id order with their
  // renormalised probabilities (greedy: the argmax with probability 1). Does not touch the
  // generator.
  struct Candidate {
    int32_t id;
    double prob;
  };
  std::vector<Candidate> candidates(const float* logits, int64_t vocab,
                                    std::span<const int32_t> history = {}) const;

  // sample() for a top-p step whose row is known only by its most probable ids: z[0, n) are the
  // n largest logits of the row in id order (the top_k op's candidates, so the row's max is among
  // them), already penalised, and row_mass is Σ over the whole row of exp((z − max z) / T) (the
  // softmax_mass op). When the nucleus (the top-p cut against row_mass) lies within these n, the
  // result is the index in z of sample()'s draw on the whole row (the same filters, then one draw
  // of the generator). When their mass stays below top_p · row_mass, the nucleus reaches past
  // them: -1, the generator untouched (the caller samples the whole row). Needs temperature > 0
  // and top_p < 1; a top-k, if any, must be at least n (it would cut the row before top-p).
  int64_t sample_nucleus(const float* z, int64_t n, double row_mass);

  const SamplingParams& params() const { return params_; }
  // The generator's next draw as the 53-bit integer r that sample() turns into u = r · 2^-53, for
  // a caller that draws elsewhere (the engine's sample_rows op on the device). Advances the
  // generator by one draw, as one sample() with temperature > 0 does.
  uint64_t draw53() { return rng_.next() >> 11; }

 private:
  // The ids still in the running, ascending, with their weights w = exp((z − max z) / T) (greedy:
  // the argmax with w = 1), and the buffers that compute them (kept across sample() calls, so a
  // decode loop allocates once).
  struct Kept {
    std::vector<int32_t> ids;
    std::vector<double> w;
    std::vector<float> z;       // the penalised logits (only with a repetition penalty)
    std::vector<uint8_t> seen;  // history ids already penalised
    struct ZPos {
      float z;
      int32_t pos;  // into ids / w
    };
    std::vector<ZPos> order;        // top-p: (z, position) pairs by probability
    std::vector<uint8_t> mark;      // top-p: the kept positions
    bool short_of_nucleus = false;  // keep() with a row_mass: the nucleus reaches past these ids
  };
  // row_mass > 0: top-p measures against it instead of the kept weights' sum (sample_nucleus).
  void keep(const float* logits, int64_t vocab, std::span<const int32_t> history, Kept& kept,
            double row_mass = 0) const;
  int32_t draw(const Kept& kept);

  SamplingParams params_;
  Xoshiro256 rng_;
  Kept scratch_;
};

// ---- stop conditions --------------------------------------------------------------------------

enum class StopReason {
  none,
  eos,          // an id of eos_ids was generated
  stop_string,  // the text contains a stop string
  max_tokens,   // max_tokens ids were generated
};
// OpenAI's finish_reason: "stop" (eos, stop string), "length" (max tokens), "" (none).
const char* finish_reason(StopReason reason);
const char* to_string(StopReason reason);

struct StopParams {
  std::vector<int32_t> eos_ids = {};  // any of these ids ends generation; its text is dropped
  std::vector<std::string> stop_strings = {};  // non-empty UTF-8; matched on the decoded text
  int64_t max_tokens = 0;                      // >= 0; 0 = no limit
};

// Fed each generated id with its decoded text piece (hybrid::IncrementalDecoder::push), returns
// the text that may be shown to the user (vLLM's stop semantics, checked in this order):
//   - an EOS id stops; its piece is not emitted;
//   - a stop string stops; the text is cut just before the earliest match (over the whole
//     stream, across token boundaries) and nothing from the stop string on is ever emitted;
//   - the max_tokens-th id stops; its piece counts as output.
// Text that could still be the start of a stop string is held back until it is known not to be
// one. A stream always ends with finish(decoder.flush()), also after a stop: it releases the text
// still held back (an EOS or max-tokens stop keeps it, as the decoder's flush could still complete
// a stop string). The concatenation of every emit and finish() is the visible text. push() after a
// stop or after finish() is an error.
class StopChecker {
 public:
  // Throws hybrid::Error on an empty stop string or a negative max_tokens.
  explicit StopChecker(StopParams params);

  struct Result {
    std::string emit;
    bool stop = false;
    StopReason reason = StopReason::none;
  };
  Result push(int32_t id, std::string_view piece);

  // Ends the stream: appends `tail` (IncrementalDecoder::flush(), may be empty), cuts at a stop
  // string if one appears, and returns the held-back text. Returns "" after a stop-string stop.
  std::string finish(std::string_view tail = {});

  bool stopped() const { return reason_ != StopReason::none; }
  StopReason reason() const { return reason_; }
  int64_t tokens() const { return tokens_; }
  // The stop string that cut the text (empty if none did; after an EOS or max-tokens stop, finish()
  // can still cut the held-back text at one, and reason() stays the first).
  const std::string& matched_stop_string() const { return matched_; }

 private:
  // Cuts held_ at the earliest stop-string match; returns whether one was found.
  bool cut_at_stop_string();
  // Length of the longest suffix of held_ that is a proper prefix of a stop string.
  size_t holdback() const;

  StopParams params_;
  std::string held_;  // decoded text not emitted yet
  int64_t tokens_ = 0;
  StopReason reason_ = StopReason::none;
  std::string matched_;
  bool finished_ = false;
};

}  // namespace hybrid
