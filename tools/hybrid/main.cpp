// hybrid: the engine's command line.
//   hybrid info -m DIR      architecture, layer pattern, parameters, per-sequence state, KV bytes
//                           per token, weight memory per device; checks DIR's safetensors (when
//                           present) against the architecture's weight table.
//   hybrid logits -m DIR --ids 1,2,3 --out FILE.npy [--device cpu|cuda]
//                           f32 logits [T, vocab] of every position, as a NumPy .npy file
//   hybrid run -m DIR --ids 1,2,3 -n N --print-ids [--device cpu|cuda]
//                           greedy continuation; prints prompt + new ids on one line
// Errors (no such path, a folder without config.json, an unknown model_type, a missing or
// wrong-shaped tensor, ids out of range) print one line each and exit 1; usage errors exit 2.
#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hybrid/core/error.h"
#include "hybrid/engine/model.h"
#include "hybrid/model/config.h"
#include "hybrid/model/model.h"
#include "hybrid/model/safetensors.h"

using namespace hybrid;
namespace fs = std::filesystem;

namespace {

const char* kUsage =
    "usage: hybrid <command> [options]\n"
    "commands:\n"
    "  info -m DIR [--kv-dtype bf16|f16|f32]   describe the model in DIR and check its weights\n"
    "  logits -m DIR --ids 1,2,3 --out FILE.npy [--device cpu|cuda]\n"
    "                                           f32 logits [T, vocab] of every position (.npy)\n"
    "  run -m DIR --ids 1,2,3 -n N --print-ids [--device cpu|cuda] [--prefill-chunk C]\n"
    "                                           greedy continuation; prompt + N ids, one line\n"
    "options:\n"
    "  -h, --help                               this text\n";

int usage_error(const std::string& what) {
  std::fprintf(stderr, "hybrid: %s\n%s", what.c_str(), kUsage);
  return 2;
}

// "79.7 B", "1.23 M"
std::string human_count(int64_t n) {
  char buf[32];
  double v = static_cast<double>(n);
  if (v >= 1e9) {
    std::snprintf(buf, sizeof buf, "%.1f B", v / 1e9);
  } else if (v >= 1e6) {
    std::snprintf(buf, sizeof buf, "%.1f M", v / 1e6);
  } else if (v >= 1e3) {
    std::snprintf(buf, sizeof buf, "%.1f K", v / 1e3);
  } else {
    std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  }
  return buf;
}

// "GGGA" repeated 12 times -> "(GGGA)x12"; a pattern with no shorter period prints as is.
std::string compress_pattern(const std::string& s) {
  for (size_t p = 1; p < s.size(); ++p) {
    if (s.size() % p != 0) continue;
    bool periodic = true;
    for (size_t i = p; i < s.size() && periodic; ++i) periodic = s[i] == s[i - p];
    if (periodic) return "(" + s.substr(0, p) + ")x" + std::to_string(s.size() / p);
  }
  return s;
}

std::string layer_summary(const Config& c) {
  std::vector<std::string> parts;
  auto add = [&](int64_t n, const char* what) {
    if (n > 0) parts.push_back(std::to_string(n) + " " + what);
  };
  add(c.count(Mixer::gdn), "GDN");
  add(c.count(Mixer::mamba), "Mamba-2");
  add(c.count(Mixer::attention), "attention");
  const bool ffn_only_layers = c.arch == Arch::nemotron_h;
  if (ffn_only_layers) {
    add(c.count(Ffn::dense), "MLP");
    add(c.count(Ffn::moe), "MoE");
  }
  std::string s = std::to_string(c.num_layers) + " layers: ";
  for (size_t i = 0; i < parts.size(); ++i) s += (i ? " + " : "") + parts[i];
  if (!ffn_only_layers && c.arch != Arch::mamba2) {
    s += ", each followed by ";
    if (c.count(Ffn::moe) == c.num_layers) {
      s += "MoE";
    } else if (c.count(Ffn::dense) == c.num_layers) {
      s += "a dense MLP";
    } else {
      s += std::to_string(c.count(Ffn::moe)) + " MoE / " + std::to_string(c.count(Ffn::dense)) +
           " dense MLP";
    }
  }
  return s;
}

bool has_safetensors(const fs::path& dir) {
  for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name == "model.safetensors.index.json") return true;
    if (e.path().extension() == ".safetensors") return true;
  }
  return false;
}

int info(const std::string& dir, int64_t kv_dtype_bytes, const std::string& kv_dtype) {
  if (!fs::exists(dir)) throw Error(dir + ": no such file or directory");
  if (!fs::is_directory(dir)) throw Error(dir + ": not a folder (pass the model's folder)");
  if (!fs::exists(fs::path(dir) / "config.json"))
    throw Error(dir + ": not a model folder (no config.json)");
  Config cfg = load_config(dir);

  std::optional<Checkpoint> ckpt;
  if (has_safetensors(dir)) ckpt.emplace(dir);
  ModelSpec spec = ckpt ? describe_model(cfg, detect_layout(cfg, *ckpt)) : describe_model(cfg);

  const AttentionConfig& a = cfg.attention;
  std::printf("model         %s\n", dir.c_str());
  std::printf("architecture  %s%s\n", std::string(arch_name(cfg.arch)).c_str(),
              cfg.nested_text_config ? " (text model of a multimodal config)" : "");
  std::printf("layers        %s\n", layer_summary(cfg).c_str());
  std::printf("pattern       %s\n", compress_pattern(cfg.layer_pattern()).c_str());
  std::printf("hidden        %lld, vocab %lld\n", static_cast<long long>(cfg.hidden_size),
              static_cast<long long>(cfg.vocab_size));
  if (cfg.count(Mixer::attention) > 0)
    std::printf("attention     %lld q / %lld kv heads x %lld, rotary %lld (theta %g)\n",
                static_cast<long long>(a.num_heads), static_cast<long long>(a.num_kv_heads),
                static_cast<long long>(a.head_dim), static_cast<long long>(a.rotary_dim),
                a.rope_theta);
  if (cfg.count(Mixer::gdn) > 0)
    std::printf(
        "gdn           %lld k / %lld v heads, K %lld, V %lld, conv %lld\n",
        static_cast<long long>(cfg.gdn.num_k_heads), static_cast<long long>(cfg.gdn.num_v_heads),
        static_cast<long long>(cfg.gdn.k_head_dim), static_cast<long long>(cfg.gdn.v_head_dim),
        static_cast<long long>(cfg.gdn.conv_kernel));
  if (cfg.count(Mixer::mamba) > 0)
    std::printf(
        "mamba         %lld heads x P %lld, N %lld, groups %lld, conv %lld, chunk %lld\n",
        static_cast<long long>(cfg.mamba.num_heads), static_cast<long long>(cfg.mamba.head_dim),
        static_cast<long long>(cfg.mamba.state_size), static_cast<long long>(cfg.mamba.n_groups),
        static_cast<long long>(cfg.mamba.conv_kernel),
        static_cast<long long>(cfg.mamba.chunk_size));
  if (cfg.count(Ffn::moe) > 0)
    std::printf("moe           %lld experts, top-%lld, expert %lld, shared %lld\n",
                static_cast<long long>(cfg.moe.num_experts), static_cast<long long>(cfg.moe.top_k),
                static_cast<long long>(cfg.moe.intermediate_size),
                static_cast<long long>(cfg.moe.shared_intermediate_size));
  if (cfg.quantization)
    std::printf("quantization  MLX affine, %lld-bit, group %lld, %zu per-module entries\n",
                static_cast<long long>(cfg.quantization->defaults.bits),
                static_cast<long long>(cfg.quantization->defaults.group_size),
                cfg.quantization->overrides.size());
  std::printf("parameters    %s (%lld)\n", human_count(spec.parameters()).c_str(),
              static_cast<long long>(spec.parameters()));
  std::printf(
      "state/seq     %s f32 (recurrent %s + conv %s)\n", format_bytes(spec.state_bytes()).c_str(),
      format_bytes(spec.ssm_state_bytes()).c_str(), format_bytes(spec.conv_state_bytes()).c_str());
  const int64_t kv = spec.kv_bytes_per_token(kv_dtype_bytes);
  if (kv == 0) {
    std::printf("kv/token      0 B (no attention layers)\n");
  } else {
    std::printf("kv/token      %s %s", format_bytes(kv).c_str(), kv_dtype.c_str());
    if (cfg.max_position_embeddings > 0)
      std::printf(" (%s at %lld tokens)", format_bytes(kv * cfg.max_position_embeddings).c_str(),
                  static_cast<long long>(cfg.max_position_embeddings));
    std::printf("\n");
  }

  std::map<DType, int64_t> bytes =
      ckpt ? checkpoint_weight_bytes(spec, *ckpt) : spec.weight_bytes();
  int64_t total = 0;
  std::string by_dtype;
  for (const auto& [t, b] : bytes) {
    total += b;
    by_dtype += std::string(by_dtype.empty() ? "" : ", ") + std::string(dtype_name(t)) + " " +
                format_bytes(b);
  }
  std::printf("weights       %s (%s)%s\n", format_bytes(total).c_str(), by_dtype.c_str(),
              ckpt ? "" : ", expected from the config");
  // One device holds every layer: the whole weight set on cpu, or on one cuda device.
  std::printf("memory        cpu: %s | cuda: %s (all weights on one device)\n",
              format_bytes(total).c_str(), format_bytes(total).c_str());

  if (!ckpt) {
    std::printf("checkpoint    no safetensors in %s (weights not checked)\n", dir.c_str());
    return 0;
  }
  std::vector<std::string> problems = weight_problems(spec, *ckpt);
  if (!problems.empty()) {
    const size_t shown = std::min<size_t>(problems.size(), 20);
    for (size_t i = 0; i < shown; ++i) std::fprintf(stderr, "error: %s\n", problems[i].c_str());
    if (problems.size() > shown)
      std::fprintf(stderr, "error: ... and %zu more problems with the weights\n",
                   problems.size() - shown);
    return 1;
  }
  size_t unused = ckpt->names().size() - spec.tensors.size();
  std::printf("checkpoint    ok: %zu tensors match the %s table", spec.tensors.size(),
              std::string(arch_name(cfg.arch)).c_str());
  if (unused > 0) std::printf(" (%zu other tensors not used)", unused);
  std::printf("\n");
  return 0;
}

// "1,2,3" -> {1, 2, 3}; nullopt when it is not a comma-separated list of integers.
std::optional<std::vector<int32_t>> parse_ids(const std::string& text) {
  std::vector<int32_t> ids;
  size_t i = 0;
  while (i <= text.size()) {
    const size_t comma = std::min(text.find(',', i), text.size());
    const std::string item = text.substr(i, comma - i);
    if (item.empty()) return std::nullopt;
    size_t used = 0;
    long long v = 0;
    try {
      v = std::stoll(item, &used);
    } catch (const std::exception&) {
      return std::nullopt;
    }
    if (used != item.size() || v < INT32_MIN || v > INT32_MAX) return std::nullopt;
    ids.push_back(static_cast<int32_t>(v));
    i = comma + 1;
  }
  return ids;
}

// NumPy .npy version 1.0: magic, version, u16 header length, a dict padded with spaces to a
// multiple of 64 bytes (ending in '\n'), then the data (little-endian f32, C order).
void write_npy(const std::string& path, const std::vector<float>& data, int64_t rows,
               int64_t cols) {
  std::string dict = "{'descr': '<f4', 'fortran_order': False, 'shape': (" + std::to_string(rows) +
                     ", " + std::to_string(cols) + "), }";
  const size_t unpadded = 10 + dict.size() + 1;
  dict.append((64 - unpadded % 64) % 64, ' ');
  dict += '\n';
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot open for writing");
  const unsigned char magic[8] = {0x93, 'N', 'U', 'M', 'P', 'Y', 1, 0};
  const uint16_t len = static_cast<uint16_t>(dict.size());
  const unsigned char len_le[2] = {static_cast<unsigned char>(len & 0xff),
                                   static_cast<unsigned char>(len >> 8)};
  bool ok = std::fwrite(magic, 1, 8, f) == 8 && std::fwrite(len_le, 1, 2, f) == 2 &&
            std::fwrite(dict.data(), 1, dict.size(), f) == dict.size() &&
            std::fwrite(data.data(), sizeof(float), data.size(), f) == data.size();
  ok = std::fclose(f) == 0 && ok;
  if (!ok) throw Error(path + ": write failed");
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command");
  if (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::printf("%s", kUsage);
    return 0;
  }
  const std::string cmd = args[0];
  if (cmd != "info" && cmd != "logits" && cmd != "run")
    return usage_error("unknown command '" + cmd + "'");
  std::string model, kv_dtype = "bf16", out, device_name = "cpu";
  std::optional<std::vector<int32_t>> ids;
  int64_t n = -1, prefill_chunk = 512;
  bool print_ids = false;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    // The value of an option that takes one, or nullptr at the end of the arguments.
    auto value = [&]() -> const std::string* {
      if (i + 1 >= args.size()) return nullptr;
      return &args[++i];
    };
    auto integer = [&](const std::string* v, int64_t& dst) {
      if (!v) return false;
      try {
        size_t used = 0;
        dst = std::stoll(*v, &used);
        return used == v->size() && dst >= 0;
      } catch (const std::exception&) {
        return false;
      }
    };
    if (a == "-h" || a == "--help") {
      std::printf("%s", kUsage);
      return 0;
    } else if (a == "-m" || a == "--model") {
      const std::string* v = value();
      if (!v) return usage_error(a + " needs a folder");
      model = *v;
    } else if (a == "--kv-dtype" && cmd == "info") {
      const std::string* v = value();
      if (!v) return usage_error("--kv-dtype needs bf16, f16 or f32");
      kv_dtype = *v;
    } else if (a == "--ids" && cmd != "info") {
      const std::string* v = value();
      if (!v) return usage_error("--ids needs a list like 1,2,3");
      ids = parse_ids(*v);
      if (!ids) return usage_error("--ids must be comma-separated integers, got '" + *v + "'");
    } else if (a == "--out" && cmd == "logits") {
      const std::string* v = value();
      if (!v) return usage_error("--out needs a file name");
      out = *v;
    } else if (a == "--device" && cmd != "info") {
      const std::string* v = value();
      if (!v) return usage_error("--device needs cpu or cuda");
      device_name = *v;
    } else if (a == "-n" && cmd == "run") {
      if (!integer(value(), n)) return usage_error("-n needs a count >= 0");
    } else if (a == "--prefill-chunk" && cmd == "run") {
      if (!integer(value(), prefill_chunk) || prefill_chunk == 0)
        return usage_error("--prefill-chunk needs a positive count");
    } else if (a == "--print-ids" && cmd == "run") {
      print_ids = true;
    } else {
      return usage_error("unknown option '" + a + "' for " + cmd);
    }
  }
  if (model.empty()) return usage_error(cmd + " needs -m DIR");
  if (cmd == "info") {
    int64_t kv_bytes = 0;
    if (kv_dtype == "bf16" || kv_dtype == "f16") {
      kv_bytes = 2;
    } else if (kv_dtype == "f32") {
      kv_bytes = 4;
    } else {
      return usage_error("--kv-dtype must be bf16, f16 or f32, got '" + kv_dtype + "'");
    }
    try {
      return info(model, kv_bytes, kv_dtype);
    } catch (const Error& e) {
      std::fprintf(stderr, "error: %s\n", e.what());
      return 1;
    }
  }
  if (!ids) return usage_error(cmd + " needs --ids 1,2,3");
  if (cmd == "logits" && out.empty()) return usage_error("logits needs --out FILE.npy");
  if (cmd == "run" && n < 0) return usage_error("run needs -n N");
  if (cmd == "run" && !print_ids)
    return usage_error("run prints ids only for now: pass --print-ids");
  try {
    const Device device = parse_device(device_name);
    std::unique_ptr<Model> m = Model::load(model, device);
    if (cmd == "logits") {
      const std::vector<float> l = m->logits(*ids);
      write_npy(out, l, static_cast<int64_t>(ids->size()), m->vocab_size());
      return 0;
    }
    const std::vector<int32_t> result = m->generate_greedy(*ids, n, prefill_chunk);
    std::string line;
    for (size_t i = 0; i < result.size(); ++i) line += (i ? "," : "") + std::to_string(result[i]);
    std::printf("%s\n", line.c_str());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
