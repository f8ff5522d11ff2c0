// The bundled demo model (models/demo, docs/DEMO.md) on the CPU against transformers (issue 8):
// tests/data/demo_golden.json, made by scripts/make_demo_golden.py from the same weights, holds
// fixed prompts with the ids of the `tokenizers` package and transformers' greedy continuation.
//   tokenizer  hybrid::Tokenizer encodes every golden text (prompts and a few mixed ones) to
//              exactly the `tokenizers` ids, and decodes the greedy ids to the golden's text
//   greedy     Model::generate_greedy on the CPU gives exactly the golden ids for the first
//              `checked` steps (those before a near tie, top1 - top2 < min_margin row stds)
// The weights' size must be the golden's (else the golden is stale: rerun the script). Skipped,
// saying so, only when models/demo has no config.json (a checkout without the model).
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "hybrid/core/device.h"
#include "hybrid/engine/model.h"
#include "hybrid/model/tokenizer.h"

#ifndef HYBRID_SOURCE_DIR
#error \
    "HYBRID_SOURCE_DIR (the source tree, for models/demo) must be defined by tests/CMakeLists.txt"
#endif

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const fs::path kDemo = fs::path(HYBRID_SOURCE_DIR) / "models" / "demo";
const fs::path kGolden = fs::path(HYBRID_SOURCE_DIR) / "tests" / "data" / "demo_golden.json";

json read_golden() {
  std::ifstream f(kGolden);
  if (!f) throw std::runtime_error(kGolden.string() + ": cannot open");
  std::stringstream s;
  s << f.rdbuf();
  return json::parse(s.str());
}

class DemoModel : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(kDemo / "config.json"))
      GTEST_SKIP() << kDemo.string() << " has no config.json: the demo model is not in this "
                   << "checkout (docs/DEMO.md says how to train it)";
    golden_ = read_golden();
    const auto bytes = static_cast<int64_t>(fs::file_size(kDemo / "model.safetensors"));
    ASSERT_EQ(bytes, golden_.at("model").at("safetensors_bytes").get<int64_t>())
        << "tests/data/demo_golden.json was made from other weights: run "
           "scripts/make_demo_golden.py";
  }
  json golden_;
};

TEST_F(DemoModel, TokenizerMatchesTheTokenizersPackage) {
  const hybrid::Tokenizer tok = hybrid::Tokenizer::from_file(kDemo.string());
  for (const json& t : golden_.at("tokenizer")) {
    const std::string text = t.at("text").get<std::string>();
    EXPECT_EQ(tok.encode(text), t.at("ids").get<std::vector<int32_t>>()) << text;
  }
  for (const json& c : golden_.at("cases")) {
    const std::string prompt = c.at("prompt").get<std::string>();
    EXPECT_EQ(tok.encode(prompt), c.at("prompt_ids").get<std::vector<int32_t>>()) << prompt;
    EXPECT_EQ(tok.decode(c.at("greedy_ids").get<std::vector<int32_t>>()),
              c.at("greedy_text").get<std::string>())
        << prompt;
  }
}

TEST_F(DemoModel, CpuGreedyEqualsTransformers) {
  auto model = hybrid::Model::load(kDemo.string(), hybrid::Device::cpu());
  ASSERT_FALSE(golden_.at("cases").empty());
  for (const json& c : golden_.at("cases")) {
    const auto prompt = c.at("prompt_ids").get<std::vector<int32_t>>();
    const auto want = c.at("greedy_ids").get<std::vector<int32_t>>();
    const auto checked = c.at("checked").get<size_t>();
    ASSERT_GE(checked, 16u) << "the golden checks too few steps";
    ASSERT_LE(checked, want.size());
    // generate_greedy returns the prompt and then the new ids; a small prefill piece makes the
    // longer prompts go through chunked prefill too.
    const std::vector<int32_t> got =
        model->generate_greedy(prompt, static_cast<int64_t>(checked), 4);
    ASSERT_EQ(got.size(), prompt.size() + checked);
    EXPECT_EQ(
        std::vector<int32_t>(got.begin() + static_cast<std::ptrdiff_t>(prompt.size()), got.end()),
        std::vector<int32_t>(want.begin(), want.begin() + static_cast<std::ptrdiff_t>(checked)))
        << "prompt: " << c.at("prompt").get<std::string>();
  }
}

}  // namespace
