// Weight tables (names, shapes, dtypes, MLX triples), sizes (the Qwen3-Next-80B-A3B figures of
// reference/gdn.md) and the check of a checkpoint against a table (missing tensor, wrong shape,
// wrong dtype, each named).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "hybrid/model/config.h"
#include "hybrid/model/model.h"
#include "hybrid/model/safetensors.h"
#include "test_files.h"

using namespace hybrid;
namespace fs = std::filesystem;
using namespace hybrid::test_files;

namespace {

std::string data(const std::string& name) {
  return (hybrid::test_files::data_dir() / "configs" / name).string();
}

// Every tensor of the weight table, zero-filled, in its published dtype.
std::vector<StTensor> entries_of(const ModelSpec& spec) {
  std::vector<StTensor> out;
  for (const TensorSpec& t : spec.tensors) out.push_back(zeros(t.name, t.dtypes.front(), t.shape));
  return out;
}

const TensorSpec& get(const ModelSpec& spec, const std::string& name) {
  const TensorSpec* t = spec.find(name);
  if (!t) throw Error("no tensor " + name + " in the table");
  return *t;
}

}  // namespace

TEST(ModelSpec, Qwen3Next80BNumbers) {
  ModelSpec s = describe_model(load_config(data("../models/qwen3_next_80b/config.json")));
  // Embedding + lm_head 2·151936·2048, 36 GDN + 12 attention mixers, 48 MoE blocks of 512
  // experts: 79.67 B (HF's count for Qwen3-Next-80B-A3B).
  EXPECT_EQ(s.parameters(), 79674391296);
  // GDN state 36 layers · 32 heads · 128 · 128 · 4 B = 72 MiB; conv 36 · 8192 · 3 · 4 B.
  EXPECT_EQ(s.ssm_state_bytes(), 36ll * 32 * 128 * 128 * 4);
  EXPECT_EQ(format_bytes(s.ssm_state_bytes()), "72.0 MiB");
  EXPECT_EQ(s.conv_state_bytes(), 36ll * 8192 * 3 * 4);
  EXPECT_EQ(format_bytes(36ll * 8192 * 3 * 4 / 36), "96.0 KiB");  // per layer
  // KV: 12 layers · 2 (K, V) · 2 heads · 256 · 2 B = 24 KiB per token; 6 GiB at 256K tokens.
  EXPECT_EQ(s.kv_bytes_per_token(), 24576);
  EXPECT_EQ(format_bytes(s.kv_bytes_per_token() * 262144), "6.00 GiB");
  EXPECT_EQ(s.weight_bytes().at(DType::bf16), 2 * s.parameters());
  EXPECT_EQ(s.weight_bytes().size(), 1u);
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.in_proj_qkvz.weight").shape,
            (std::vector<int64_t>{12288, 2048}));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.in_proj_ba.weight").shape,
            (std::vector<int64_t>{64, 2048}));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.conv1d.weight").shape,
            (std::vector<int64_t>{8192, 1, 4}));
  EXPECT_EQ(get(s, "model.layers.3.self_attn.q_proj.weight").shape,
            (std::vector<int64_t>{8192, 2048}));
  EXPECT_EQ(get(s, "model.layers.3.mlp.experts.7.down_proj.weight").shape,
            (std::vector<int64_t>{2048, 512}));
  EXPECT_EQ(get(s, "model.layers.47.mlp.shared_expert_gate.weight").shape,
            (std::vector<int64_t>{1, 2048}));
  EXPECT_EQ(s.find("model.layers.3.linear_attn.A_log"), nullptr);  // layer 3 is attention
  EXPECT_NE(s.find("lm_head.weight"), nullptr);
}

TEST(ModelSpec, Qwen35DenseTiedSeparateProjections) {
  ModelSpec s = describe_model(load_config(data("qwen3_5_tiny.json")));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.in_proj_qkv.weight").shape,
            (std::vector<int64_t>{2 * 32 + 64, 64}));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.in_proj_z.weight").shape,
            (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.in_proj_a.weight").shape,
            (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(get(s, "model.layers.1.mlp.down_proj.weight").shape, (std::vector<int64_t>{64, 128}));
  EXPECT_EQ(s.find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(s.find("model.layers.0.linear_attn.in_proj_qkvz.weight"), nullptr);
  EXPECT_EQ(s.kv_bytes_per_token(), 2 * 2 * 1 * 32 * 2);
}

TEST(ModelSpec, Qwen35MoeFusedExpertsUnderLanguageModel) {
  ModelSpec s = describe_model(load_config(data("qwen3_5_moe_vl_tiny.json")));
  EXPECT_EQ(s.layout.prefix, "model.language_model.");
  EXPECT_EQ(s.layout.experts, ExpertLayout::fused);
  EXPECT_EQ(get(s, "model.language_model.layers.0.mlp.experts.gate_up_proj").shape,
            (std::vector<int64_t>{8, 64, 64}));
  EXPECT_EQ(get(s, "model.language_model.layers.0.mlp.experts.down_proj").shape,
            (std::vector<int64_t>{8, 64, 32}));
  EXPECT_NE(s.find("model.language_model.embed_tokens.weight"), nullptr);
  EXPECT_NE(s.find("lm_head.weight"), nullptr);
}

TEST(ModelSpec, MlxQuantizedTriples) {
  Config c = load_config(data("qwen3_next_tiny_mlx4.json"));
  ModelSpec s = describe_model(c);
  EXPECT_EQ(s.layout.experts, ExpertLayout::mlx_switch);
  // 4-bit, group 32: weight u32 [out, in / 8], scales and biases [out, in / 32].
  const TensorSpec& w = get(s, "model.layers.0.linear_attn.in_proj_qkvz.weight");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{192, 8}));
  EXPECT_EQ(w.dtypes, std::vector<DType>{DType::u32});
  EXPECT_EQ(w.params, 192 * 64);
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.in_proj_qkvz.scales").shape,
            (std::vector<int64_t>{192, 2}));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.in_proj_qkvz.biases").params, 0);
  // Per-module overrides: 8-bit group 64 router; layer 1's router stored unquantized.
  EXPECT_EQ(get(s, "model.layers.0.mlp.gate.weight").shape, (std::vector<int64_t>{4, 16}));
  EXPECT_EQ(get(s, "model.layers.0.mlp.gate.scales").shape, (std::vector<int64_t>{4, 1}));
  EXPECT_EQ(get(s, "model.layers.1.mlp.gate.weight").shape, (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(s.find("model.layers.1.mlp.gate.scales"), nullptr);
  EXPECT_EQ(get(s, "lm_head.weight").shape, (std::vector<int64_t>{128, 16}));
  // Stacked experts [E, out, in · bits / 32]; conv weights channels-last; never-quantized tensors.
  EXPECT_EQ(get(s, "model.layers.0.mlp.switch_mlp.down_proj.weight").shape,
            (std::vector<int64_t>{4, 64, 8}));
  EXPECT_EQ(get(s, "model.layers.0.mlp.switch_mlp.down_proj.scales").shape,
            (std::vector<int64_t>{4, 64, 2}));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.conv1d.weight").shape,
            (std::vector<int64_t>{128, 4, 1}));
  EXPECT_EQ(get(s, "model.layers.0.linear_attn.A_log").shape, (std::vector<int64_t>{4}));
  // The logical parameter count does not depend on the storage.
  Config plain = c;
  plain.quantization.reset();
  EXPECT_EQ(s.parameters(), describe_model(plain).parameters());
}

TEST(ModelSpec, Mamba2Table) {
  ModelSpec s = describe_model(load_config(data("mamba2_tiny.json")));
  EXPECT_EQ(s.layout.prefix, "backbone.");
  EXPECT_EQ(get(s, "backbone.layers.2.mixer.in_proj.weight").shape,
            (std::vector<int64_t>{328, 64}));
  EXPECT_EQ(get(s, "backbone.layers.0.mixer.conv1d.weight").shape,
            (std::vector<int64_t>{192, 1, 4}));
  EXPECT_EQ(get(s, "backbone.layers.0.mixer.conv1d.bias").shape, (std::vector<int64_t>{192}));
  EXPECT_EQ(get(s, "backbone.layers.0.mixer.D").shape, (std::vector<int64_t>{8}));
  EXPECT_EQ(get(s, "backbone.layers.0.mixer.norm.weight").shape, (std::vector<int64_t>{128}));
  EXPECT_NE(s.find("backbone.norm_f.weight"), nullptr);
  EXPECT_EQ(s.find("lm_head.weight"), nullptr);  // tied
  EXPECT_EQ(s.ssm_state_bytes(), 3 * 8 * 16 * 16 * 4);
  EXPECT_EQ(s.conv_state_bytes(), 3 * 192 * 3 * 4);
  EXPECT_EQ(s.kv_bytes_per_token(), 0);
}

TEST(ModelSpec, NemotronHTable) {
  ModelSpec s = describe_model(load_config(data("nemotron_h_tiny.json")));
  EXPECT_EQ(get(s, "backbone.layers.0.mixer.in_proj.weight").shape,
            (std::vector<int64_t>{2 * 64 + 2 * 2 * 16 + 8, 64}));
  EXPECT_EQ(get(s, "backbone.layers.1.mixer.up_proj.weight").shape, (std::vector<int64_t>{96, 64}));
  EXPECT_EQ(get(s, "backbone.layers.3.mixer.q_proj.weight").shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(get(s, "backbone.layers.3.mixer.k_proj.weight").shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(get(s, "backbone.layers.5.mixer.experts.3.down_proj.weight").shape,
            (std::vector<int64_t>{64, 32}));
  EXPECT_EQ(get(s, "backbone.layers.5.mixer.shared_experts.up_proj.weight").shape,
            (std::vector<int64_t>{48, 64}));
  EXPECT_EQ(get(s, "backbone.layers.5.mixer.gate.e_score_correction_bias").shape,
            (std::vector<int64_t>{4}));
  EXPECT_EQ(s.find("backbone.layers.3.mixer.q_norm.weight"), nullptr);
  EXPECT_EQ(s.kv_bytes_per_token(), 1 * 2 * 2 * 16 * 2);
  EXPECT_EQ(s.ssm_state_bytes(), 2 * 8 * 8 * 16 * 4);
}

TEST(ModelSpec, NemotronHMlxExperts) {
  Config c = load_config(data("nemotron_h_tiny.json"));
  c.quantization = QuantConfig{};
  c.quantization->defaults = {32, 4};
  ModelSpec s = describe_model(c);
  EXPECT_EQ(get(s, "backbone.layers.5.mixer.switch_mlp.fc1.weight").shape,
            (std::vector<int64_t>{4, 32, 8}));
  EXPECT_EQ(get(s, "backbone.layers.5.mixer.switch_mlp.fc2.scales").shape,
            (std::vector<int64_t>{4, 64, 1}));
  EXPECT_EQ(get(s, "backbone.layers.0.mixer.conv1d.weight").shape,
            (std::vector<int64_t>{64 + 2 * 2 * 16, 4, 1}));
  // The conv weights, norms and the router's correction bias are never quantized.
  EXPECT_EQ(s.find("backbone.layers.0.mixer.conv1d.scales"), nullptr);
  EXPECT_EQ(get(s, "backbone.layers.5.mixer.gate.e_score_correction_bias").bits, 0);
}

TEST(ModelSpec, CheckpointMatches) {
  TempDir d;
  ModelSpec s = describe_model(load_config(data("mamba2_tiny.json")));
  write_safetensors(d.path / "model.safetensors", entries_of(s));
  Checkpoint ckpt(d.path.string());
  EXPECT_TRUE(weight_problems(s, ckpt).empty());
  check_weights(s, ckpt);
  EXPECT_EQ(checkpoint_weight_bytes(s, ckpt).at(DType::bf16), s.total_weight_bytes());
}

TEST(ModelSpec, CheckpointMissingTensor) {
  TempDir d;
  ModelSpec s = describe_model(load_config(data("mamba2_tiny.json")));
  std::vector<StTensor> e = entries_of(s);
  e.erase(std::remove_if(e.begin(), e.end(),
                         [](const StTensor& x) { return x.name == "backbone.layers.1.mixer.D"; }),
          e.end());
  write_safetensors(d.path / "model.safetensors", e);
  Checkpoint ckpt(d.path.string());
  EXPECT_HYBRID_ERROR(check_weights(s, ckpt),
                      "[model] backbone.layers.1.mixer.D: missing (expected [8] bf16|f16|f32)");
}

TEST(ModelSpec, CheckpointWrongShapeAndDtype) {
  TempDir d;
  ModelSpec s = describe_model(load_config(data("mamba2_tiny.json")));
  std::vector<StTensor> e = entries_of(s);
  for (StTensor& x : e) {
    if (x.name == "backbone.layers.1.mixer.out_proj.weight") x = zeros(x.name, x.dtype, {64, 64});
    if (x.name == "backbone.norm_f.weight") x = zeros(x.name, DType::i32, x.shape);
  }
  write_safetensors(d.path / "model.safetensors", e);
  Checkpoint ckpt(d.path.string());
  std::vector<std::string> problems = weight_problems(s, ckpt);
  ASSERT_EQ(problems.size(), 2u);
  EXPECT_EQ(problems[0],
            "[model] backbone.layers.1.mixer.out_proj.weight: expected [64, 128] bf16|f16|f32, "
            "got [64, 64] bf16");
  EXPECT_EQ(problems[1],
            "[model] backbone.norm_f.weight: expected [64] bf16|f16|f32, got [64] i32");
  EXPECT_HYBRID_ERROR(check_weights(s, ckpt), "(and 1 more problems)");
}

TEST(ModelSpec, DetectLayoutFromCheckpoint) {
  // A Qwen3.5-MoE checkpoint written with per-expert tensors under "model.language_model.", an
  // extra mtp.* tensor, and MLX-ordered conv weights.
  Config c = load_config(data("qwen3_5_moe_vl_tiny.json"));
  WeightLayout want = default_layout(c);
  want.experts = ExpertLayout::per_expert;
  want.conv_channels_last = true;
  ModelSpec s = describe_model(c, want);
  std::vector<StTensor> e = entries_of(s);
  e.push_back(zeros("mtp.embed_tokens.weight", DType::bf16, {4}));
  TempDir d;
  write_safetensors(d.path / "model.safetensors", e);
  Checkpoint ckpt(d.path.string());
  WeightLayout got = detect_layout(c, ckpt);
  EXPECT_EQ(got.prefix, "model.language_model.");
  EXPECT_EQ(got.experts, ExpertLayout::per_expert);
  EXPECT_TRUE(got.conv_channels_last);
  EXPECT_TRUE(weight_problems(describe_model(c, got), ckpt).empty());
  // The default layout (fused experts, HF conv order) reports the fused tensors as missing and the
  // conv weights as wrong-shaped.
  std::vector<std::string> p = weight_problems(describe_model(c), ckpt);
  EXPECT_NE(std::find(p.begin(), p.end(),
                      "[model] model.language_model.layers.0.mlp.experts.gate_up_proj: missing "
                      "(expected [8, 64, 64] bf16|f16|f32)"),
            p.end());
  EXPECT_NE(std::find(p.begin(), p.end(),
                      "[model] model.language_model.layers.0.linear_attn.conv1d.weight: expected "
                      "[128, 1, 4] bf16|f16|f32, got [128, 4, 1] bf16"),
            p.end());
}
