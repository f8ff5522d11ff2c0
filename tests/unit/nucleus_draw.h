// Test helper: a Runner::decode_top_p row drawn the way the engine draws it (model.cpp's
// sample_nucleus_row), written out here so that the tests check the engine's pieces against
// Sampler's whole-row draw rather than call the engine's own drawing code.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/runner.h"
#include "hybrid/engine/sampling.h"

namespace hybrid::test {

// Sampler::sample_nucleus on row n's k candidates in id order: the drawn id, or -1 when the row's
// nucleus reaches past the candidates (the caller then draws the whole row).
inline int32_t draw_in_nucleus(Sampler& sampler, const engine::Runner::Nucleus& nu, size_t n,
                               int64_t k) {
  std::vector<std::pair<int32_t, float>> cand;
  for (int64_t j = 0; j < k; ++j)
    cand.emplace_back(nu.top.ids[n * k + j], nu.top.values[n * k + j]);
  std::sort(cand.begin(), cand.end());
  std::vector<float> z;
  for (const auto& [id, v] : cand) z.push_back(v);
  const int64_t j = sampler.sample_nucleus(z.data(), k, nu.mass[n]);
  return j >= 0 ? cand[static_cast<size_t>(j)].first : -1;
}

}  // namespace hybrid::test
