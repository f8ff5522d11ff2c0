// config.json parsing: every architecture's fields and transformers' defaults, rope_parameters vs
// the top-level rope fields, multimodal text_config, layer patterns, MLX quantization overrides,
// and the error paths (each names the field and the file).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>

#include "expect_error.h"
#include "hybrid/model/config.h"
#include "test_files.h"

using namespace hybrid;
namespace fs = std::filesystem;

namespace {

std::string data(const std::string& name) {
  return (hybrid::test_files::data_dir() / "configs" / name).string();
}

const char* kMinimalQwen3Next =
    R"({"model_type": "qwen3_next", "hidden_size": 2048, "num_hidden_layers": 48,
        "vocab_size": 151936})";

}  // namespace

TEST(Config, Qwen3Next80B) {
  Config c = load_config(data("../models/qwen3_next_80b/config.json"));
  EXPECT_EQ(c.arch, Arch::qwen3_next);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.num_layers, 48);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.max_position_embeddings, 262144);
  EXPECT_TRUE(c.zero_centered_norm);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-6);
  EXPECT_EQ(c.attention.num_heads, 16);
  EXPECT_EQ(c.attention.num_kv_heads, 2);
  EXPECT_EQ(c.attention.head_dim, 256);
  EXPECT_EQ(c.attention.rotary_dim, 64);
  EXPECT_DOUBLE_EQ(c.attention.rope_theta, 1e7);
  EXPECT_TRUE(c.attention.output_gate);
  EXPECT_TRUE(c.attention.qk_norm);
  EXPECT_EQ(c.gdn.num_k_heads, 16);
  EXPECT_EQ(c.gdn.num_v_heads, 32);
  EXPECT_EQ(c.gdn.conv_dim(), 8192);
  EXPECT_EQ(c.gdn.conv_kernel, 4);
  EXPECT_EQ(c.moe.num_experts, 512);
  EXPECT_EQ(c.moe.top_k, 10);
  EXPECT_EQ(c.moe.intermediate_size, 512);
  EXPECT_EQ(c.moe.shared_intermediate_size, 512);
  EXPECT_TRUE(c.moe.shared_expert_gate);
  EXPECT_EQ(c.count(Mixer::gdn), 36);
  EXPECT_EQ(c.count(Mixer::attention), 12);
  EXPECT_EQ(c.count(Ffn::moe), 48);
  EXPECT_EQ(c.layer_pattern().substr(0, 8), "GGGAGGGA");
  EXPECT_EQ(c.layers[3].mixer, Mixer::attention);
  EXPECT_EQ(c.layers[4].mixer, Mixer::gdn);
  EXPECT_FALSE(c.quantization.has_value());
}

TEST(Config, Qwen3NextDefaultsAreTransformers) {
  Config c = parse_config(kMinimalQwen3Next, "mem.json");
  EXPECT_EQ(c.attention.num_heads, 16);
  EXPECT_EQ(c.attention.num_kv_heads, 2);
  EXPECT_EQ(c.attention.head_dim, 256);
  EXPECT_DOUBLE_EQ(c.attention.partial_rotary_factor, 0.25);
  EXPECT_DOUBLE_EQ(c.attention.rope_theta, 10000.0);
  EXPECT_EQ(c.max_position_embeddings, 32768);
  EXPECT_EQ(c.gdn.num_v_heads, 32);
  EXPECT_EQ(c.gdn.k_head_dim, 128);
  EXPECT_EQ(c.moe.num_experts, 512);
  EXPECT_EQ(c.count(Mixer::attention), 12);
  EXPECT_EQ(c.count(Ffn::moe), 48);
  EXPECT_EQ(c.dtype, "bfloat16");
}

TEST(Config, Qwen3NextDenseLayersAndInterval) {
  Config c = load_config(data("qwen3_next_tiny.json"));
  EXPECT_EQ(c.layer_pattern(), "GAGA");
  EXPECT_EQ(c.layers[0].ffn, Ffn::moe);
  EXPECT_EQ(c.layers[1].ffn, Ffn::dense);  // mlp_only_layers: [1]
  EXPECT_EQ(c.layers[2].ffn, Ffn::moe);
  EXPECT_EQ(c.attention.rotary_dim, 8);
  EXPECT_EQ(c.intermediate_size, 96);
}

TEST(Config, DecoderSparseStep) {
  Config c = parse_config(
      R"({"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4,
          "vocab_size": 10, "decoder_sparse_step": 2})",
      "mem.json");
  EXPECT_EQ(c.layers[0].ffn, Ffn::dense);
  EXPECT_EQ(c.layers[1].ffn, Ffn::moe);
  EXPECT_EQ(c.layers[2].ffn, Ffn::dense);
  EXPECT_EQ(c.layers[3].ffn, Ffn::moe);
}

TEST(Config, RopeParametersAndTopLevelAgree) {
  Config top = parse_config(
      R"({"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 10,
          "rope_theta": 500000.0, "partial_rotary_factor": 0.5})",
      "top.json");
  Config dict = parse_config(
      R"({"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 10,
          "rope_parameters": {"rope_type": "default", "rope_theta": 500000.0,
                              "partial_rotary_factor": 0.5}})",
      "dict.json");
  EXPECT_DOUBLE_EQ(top.attention.rope_theta, 500000.0);
  EXPECT_DOUBLE_EQ(dict.attention.rope_theta, 500000.0);
  EXPECT_EQ(top.attention.rotary_dim, 128);
  EXPECT_EQ(dict.attention.rotary_dim, 128);
  // Both present: rope_parameters (transformers 5) wins.
  Config both = parse_config(
      R"({"model_type": "qwen3_next", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 10,
          "rope_theta": 1.0e6, "rope_parameters": {"rope_theta": 2.0e6}})",
      "both.json");
  EXPECT_DOUBLE_EQ(both.attention.rope_theta, 2.0e6);
  EXPECT_EQ(both.attention.rotary_dim, 64);  // partial_rotary_factor default 0.25
}

TEST(Config, Qwen35DenseLayerTypes) {
  Config c = load_config(data("qwen3_5_tiny.json"));
  EXPECT_EQ(c.arch, Arch::qwen3_5);
  EXPECT_EQ(c.layer_pattern(), "GAGA");
  EXPECT_EQ(c.count(Ffn::dense), 4);
  EXPECT_EQ(c.count(Ffn::moe), 0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.attention.rotary_dim, 16);
  EXPECT_DOUBLE_EQ(c.attention.rope_theta, 1e7);
}

TEST(Config, Qwen35MoeNestedTextConfig) {
  Config c = load_config(data("qwen3_5_moe_vl_tiny.json"));
  EXPECT_EQ(c.model_type, "qwen3_5_moe");
  EXPECT_EQ(c.arch, Arch::qwen3_5_moe);
  EXPECT_TRUE(c.nested_text_config);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.layer_pattern(), "GGGA");
  EXPECT_EQ(c.moe.num_experts, 8);
  EXPECT_EQ(c.count(Ffn::moe), 4);
  EXPECT_EQ(c.attention.mrope_section, (std::vector<int64_t>{11, 11, 10}));
  EXPECT_EQ(c.attention.rotary_dim, 8);
}

TEST(Config, NestedTextConfigTakesTopLevelTie) {
  Config c = parse_config(
      R"({"model_type": "qwen3_5", "tie_word_embeddings": true,
          "text_config": {"hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 10}})",
      "vl.json");
  EXPECT_EQ(c.arch, Arch::qwen3_5);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.attention.num_kv_heads, 2);  // Qwen3_5TextConfig default
  EXPECT_EQ(c.intermediate_size, 12288);
}

TEST(Config, Mamba2) {
  Config c = load_config(data("mamba2_tiny.json"));
  EXPECT_EQ(c.arch, Arch::mamba2);
  EXPECT_EQ(c.layer_pattern(), "MMM");
  EXPECT_EQ(c.mamba.d_inner(), 128);
  EXPECT_EQ(c.mamba.conv_dim(), 128 + 2 * 2 * 16);
  EXPECT_EQ(c.mamba.in_proj_dim(), 2 * 128 + 2 * 2 * 16 + 8);
  EXPECT_EQ(c.mamba.norm_group_size(), 64);
  EXPECT_EQ(c.mamba.chunk_size, 32);
  EXPECT_DOUBLE_EQ(c.mamba.dt_min, 0.0);
  EXPECT_TRUE(std::isinf(c.mamba.dt_max));  // Python's bare Infinity
  EXPECT_DOUBLE_EQ(c.norm_eps, 1e-5);
  EXPECT_TRUE(c.tie_word_embeddings);
}

TEST(Config, Mamba2HeadsMustTileExpand) {
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "mamba2", "hidden_size": 64,
        "num_hidden_layers": 2, "vocab_size": 10, "num_heads": 4, "head_dim": 16, "n_groups": 1})",
                                   "m.json"),
                      "m.json: num_heads: num_heads x head_dim = 4 x 16 = 64 but expand x "
                      "hidden_size = 128");
}

TEST(Config, NemotronHPattern) {
  Config c = load_config(data("nemotron_h_tiny.json"));
  EXPECT_EQ(c.arch, Arch::nemotron_h);
  EXPECT_EQ(c.layer_pattern(), "M-MA-E");
  EXPECT_EQ(c.count(Mixer::mamba), 2);
  EXPECT_EQ(c.count(Mixer::attention), 1);
  EXPECT_EQ(c.count(Ffn::dense), 2);
  EXPECT_EQ(c.count(Ffn::moe), 1);
  EXPECT_EQ(c.attention.head_dim, 16);  // attention_head_dim
  EXPECT_EQ(c.attention.rotary_dim, 0);
  EXPECT_EQ(c.hidden_act, "relu2");
  EXPECT_EQ(c.mamba.n_groups, 2);
  EXPECT_EQ(c.mamba.chunk_size, 16);
  EXPECT_EQ(c.moe.shared_intermediate_size, 48);
  EXPECT_DOUBLE_EQ(c.moe.routed_scaling_factor, 2.5);
  EXPECT_TRUE(c.moe.sigmoid_router);
}

TEST(Config, NemotronHLayersBlockType) {
  Config c = parse_config(
      R"({"model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 10,
          "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 2,
          "layers_block_type": ["mamba", "moe", "attention", "mlp"]})",
      "n.json");
  EXPECT_EQ(c.layer_pattern(), "MEA-");
}

// As transformers 5 saves configs: the mixers named linear_attention / full_attention, and
// non-finite floats as {"__float__": "Infinity"}.
TEST(Config, Transformers5Spellings) {
  Config c = parse_config(
      R"({"model_type": "nemotron_h", "hidden_size": 64, "num_hidden_layers": 4, "vocab_size": 10,
          "mamba_num_heads": 8, "mamba_head_dim": 8, "n_groups": 2,
          "time_step_limit": [0.0, {"__float__": "Infinity"}],
          "layers_block_type": ["linear_attention", "moe", "full_attention", "mlp"]})",
      "n.json");
  EXPECT_EQ(c.layer_pattern(), "MEA-");
  EXPECT_TRUE(std::isinf(c.mamba.dt_max));
}

TEST(Config, QuantizationOverrides) {
  Config c = load_config(data("qwen3_next_tiny_mlx4.json"));
  ASSERT_TRUE(c.quantization.has_value());
  const QuantConfig& q = *c.quantization;
  EXPECT_EQ(q.defaults, (QuantParams{32, 4}));
  EXPECT_EQ(q.for_module("model.layers.0.linear_attn.in_proj_qkvz"), (QuantParams{32, 4}));
  EXPECT_EQ(q.for_module("model.layers.0.mlp.gate"), (QuantParams{64, 8}));
  EXPECT_FALSE(q.for_module("model.layers.1.mlp.gate").has_value());
  EXPECT_EQ(q.for_module("lm_head"), (QuantParams{32, 8}));  // group_size inherited
}

TEST(Config, QuantizationErrors) {
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "mamba2", "hidden_size": 64,
        "num_hidden_layers": 1, "vocab_size": 10, "num_heads": 8, "head_dim": 16, "n_groups": 1,
        "quantization": {"group_size": 48, "bits": 4}})",
                                   "q.json"),
                      "q.json: quantization.group_size: must be 32, 64 or 128, got 48");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "mamba2", "hidden_size": 64,
        "num_hidden_layers": 1, "vocab_size": 10, "num_heads": 8, "head_dim": 16, "n_groups": 1,
        "quantization_config": {"quant_method": "fp8"}})",
                                   "q.json"),
                      "quantization_config.quant_method: 'fp8' is not supported");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "mamba2", "hidden_size": 64,
        "num_hidden_layers": 1, "vocab_size": 10, "num_heads": 8, "head_dim": 16, "n_groups": 1,
        "quantization": {"group_size": 64, "bits": 4, "backbone.layers.0.mixer.in_proj": 3}})",
                                   "q.json"),
                      "backbone.layers.0.mixer.in_proj: must be a boolean or an object");
}

TEST(Config, UnknownModelTypeNamesTheFile) {
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "llama", "hidden_size": 8})", "x/config.json"),
                      "[config] x/config.json: unknown model_type 'llama'");
}

TEST(Config, MissingFieldNamesIt) {
  EXPECT_HYBRID_ERROR(
      parse_config(R"({"model_type": "qwen3_next", "num_hidden_layers": 4, "vocab_size": 10})",
                   "c.json"),
      "[config] c.json: missing required field 'hidden_size'");
  EXPECT_HYBRID_ERROR(parse_config(R"({"hidden_size": 8})", "c.json"),
                      "missing required field 'model_type'");
  EXPECT_HYBRID_ERROR(
      parse_config(R"({"model_type": "qwen3_5_moe", "text_config": {"hidden_size": 64,
                       "vocab_size": 10}})",
                   "vl.json"),
      "[config] vl.json: missing required field 'text_config.num_hidden_layers'");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "nemotron_h", "hidden_size": 64,
        "num_hidden_layers": 4, "vocab_size": 10})",
                                   "n.json"),
                      "missing required field 'hybrid_override_pattern'");
}

TEST(Config, BadJsonAndTypes) {
  EXPECT_HYBRID_ERROR(parse_config("{\"model_type\": \"qwen3_next\",", "bad.json"),
                      "[config] bad.json: not valid JSON");
  EXPECT_HYBRID_ERROR(parse_config("[1, 2]", "arr.json"), "expected a JSON object");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "qwen3_next", "hidden_size": "2048",
        "num_hidden_layers": 4, "vocab_size": 10})",
                                   "t.json"),
                      "t.json: hidden_size: must be an integer, got a string");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "qwen3_next", "hidden_size": 64,
        "num_hidden_layers": 4, "vocab_size": 10, "num_key_value_heads": 3})",
                                   "t.json"),
                      "num_attention_heads: 16 is not a multiple of num_key_value_heads = 3");
}

TEST(Config, BadLayerPatterns) {
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "qwen3_next", "hidden_size": 64,
        "num_hidden_layers": 3, "vocab_size": 10, "layer_types": ["linear_attention"]})",
                                   "l.json"),
                      "layer_types: has 1 entries, num_hidden_layers is 3");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "qwen3_next", "hidden_size": 64,
        "num_hidden_layers": 1, "vocab_size": 10, "layer_types": ["sliding_attention"]})",
                                   "l.json"),
                      "entry 0 is 'sliding_attention'");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "nemotron_h", "hidden_size": 64,
        "num_hidden_layers": 3, "vocab_size": 10, "mamba_num_heads": 8, "n_groups": 2,
        "hybrid_override_pattern": "M*X"})",
                                   "n.json"),
                      "hybrid_override_pattern: character 2 is 'X'");
  EXPECT_HYBRID_ERROR(parse_config(R"({"model_type": "nemotron_h", "hidden_size": 64,
        "num_hidden_layers": 3, "vocab_size": 10, "mamba_num_heads": 8, "n_groups": 2,
        "hybrid_override_pattern": "M*"})",
                                   "n.json"),
                      "hybrid_override_pattern: describes 2 layers, num_hidden_layers is 3");
}

TEST(Config, LoadConfigPaths) {
  EXPECT_HYBRID_ERROR(load_config("/nonexistent/model"), "no such file or directory");
  fs::path dir = fs::temp_directory_path() / ("hybrid_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  EXPECT_HYBRID_ERROR(load_config(dir.string()), "not a model folder (no config.json)");
  { std::ofstream(dir / "config.json") << kMinimalQwen3Next; }
  EXPECT_EQ(load_config(dir.string()).hidden_size, 2048);
  EXPECT_EQ(load_config(dir.string()).path, (dir / "config.json").string());
  fs::remove_all(dir);
}
