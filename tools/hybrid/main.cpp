// hybrid: the engine's command line.
//   hybrid info -m DIR      architecture, layer pattern, parameters, per-sequence state, KV bytes
//                           per token, weight memory per device; checks DIR's safetensors (when
//                           present) against the architecture's weight table.
//   hybrid logits -m DIR --ids 1,2,3 --out FILE.npy [--device cpu|cuda]
//                           f32 logits [T, vocab] of every position, as a NumPy .npy file
//   hybrid run -m DIR -p TEXT | --ids 1,2,3 [-n N] [sampling] [--chat] [--stop S]... [--print-ids]
//                           generation: the text streamed to stdout (or, with --print-ids, the
//                           generated ids on one line), llama.cpp-style timings on stderr.
//                           Several prompts (-p repeated, -f FILE one per line) run as one batch:
//                           each continuation printed after the batch ends, under a label.
//   hybrid bench -m DIR [-p 512] [-n 128] [-r 3]
//                           prompt processing and generation tokens/s, llama-bench's table
// Without -m every command uses the bundled demo model (docs/DEMO.md): $HYBRID_DEMO_MODEL, else
// models/demo of the source tree this binary was built from; it runs on CUDA when a GPU is present
// (unless --device says otherwise), else on the CPU.
// Loading shows the weight bytes read and long prompts the prefill progress, on standard error
// (redrawn in place on a terminal, a line every few seconds otherwise).
// Errors (no such path, a folder without config.json, an unknown model_type, a missing or
// wrong-shaped tensor, ids out of range, a prompt longer than the context, no tokenizer.json for
// -p, weights larger than the device's memory) print one line each, saying what to do where there
// is something to do, and exit 1; usage errors exit 2.
#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <unistd.h>

#include "hybrid/core/error.h"
#include "hybrid/engine/model.h"
#include "hybrid/engine/sampling.h"
#include "hybrid/model/config.h"
#include "hybrid/model/model.h"
#include "hybrid/model/safetensors.h"
#include "hybrid/model/tokenizer.h"

#ifndef HYBRID_SOURCE_DIR
#error \
    "HYBRID_SOURCE_DIR (the source tree, for models/demo) must be defined by tools/hybrid/CMakeLists.txt"
#endif

using namespace hybrid;
namespace fs = std::filesystem;

namespace {

const char* kUsage =
    "usage: hybrid <command> [options]\n"
    "  Without -m DIR, the bundled demo model (models/demo, or $HYBRID_DEMO_MODEL) is used, on\n"
    "  CUDA when a GPU is present. DIR: a Hugging Face checkpoint folder (config.json,\n"
    "  *.safetensors, tokenizer.json), e.g. from `hf download ORG/NAME --local-dir DIR`.\n"
    "commands:\n"
    "  info -m DIR [--kv-dtype bf16|f16|f32]   describe the model in DIR and check its weights\n"
    "  logits -m DIR --ids 1,2,3 --out FILE.npy [--device cpu|cuda]\n"
    "                                           f32 logits [T, vocab] of every position (.npy)\n"
    "  run -m DIR (-p TEXT | --ids 1,2,3) [options]\n"
    "                                           generate; text to stdout, timings to stderr\n"
    "      -p TEXT (repeated), -f FILE\n"
    "                           several prompts (FILE: one per line, empty lines skipped)\n"
    "                           run as one batch: one decode step for all of them; each\n"
    "                           continuation is printed under '--- [i/N] prompt ---' (with\n"
    "                           --print-ids: one line of ids per prompt, in order)\n"
    "      -n N                 new tokens at most (default 256)\n"
    "      -c N, --ctx-size N   tokens the sequence holds, prompt included (default: the\n"
    "                           model's max_position_embeddings)\n"
    "      --temp T             temperature (default 0 = greedy)\n"
    "      --top-k K --top-p P --min-p M --repeat-penalty R --seed S\n"
    "                           sampling filters (off by default), generator seed (default 0)\n"
    "      --chat               wrap the prompt in ChatML (<|im_start|>user ...)\n"
    "      --stop STR           stop at this text (repeatable; \\n \\t escapes)\n"
    "      --print-ids          print only the generated ids, space-separated, on one line\n"
    "      --prefill-chunk C    prompt tokens per prefill step (default 512 on the CPU, 4096 on "
    "CUDA)\n"
    "      --device cpu|cuda    (default cpu; the demo model: cuda when a GPU is present)\n"
    "      --no-graph           run the CUDA decode step eagerly (no CUDA graph)\n"
    "  bench -m DIR [-p 512] [-n 128] [-r 3] [--device cpu|cuda] [--prefill-chunk C] [--no-graph]\n"
    "                                           pp/tg tokens/s (mean +- stddev), markdown table\n"
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

// The bundled demo model's folder: $HYBRID_DEMO_MODEL, else models/demo of the source tree.
std::string demo_model_dir() {
  if (const char* env = std::getenv("HYBRID_DEMO_MODEL"); env && *env) return env;
  return (fs::path(HYBRID_SOURCE_DIR) / "models" / "demo").string();
}

// A folder below `dir` (at most 4 levels down, first in name order) that holds a config.json, as
// in a Hugging Face cache (models--ORG--NAME/snapshots/HASH/) or an archive unpacked into a
// folder of its own; empty when there is none. Looks at 20000 entries at most (-m $HOME).
std::string nested_model_folder(const fs::path& dir) {
  std::vector<std::string> found;
  std::error_code ec;
  fs::recursive_directory_iterator it(dir, fs::directory_options::skip_permission_denied, ec), end;
  for (int seen = 0; !ec && it != end && seen < 20000; it.increment(ec), ++seen) {
    if (it.depth() >= 4) {
      it.disable_recursion_pending();
      continue;
    }
    if (it->path().filename() == "config.json") found.push_back(it->path().parent_path().string());
  }
  std::sort(found.begin(), found.end());
  return found.empty() ? std::string() : found.front();
}

// The folder checks of Model::load, made first (before the tokenizer and the config are read) so
// that a newcomer's mistake gets a message that says what to pass instead.
void check_model_folder(const std::string& dir) {
  if (!fs::exists(dir))
    throw Error("[model] " + dir +
                ": no such file or directory (-m takes the folder of a Hugging Face checkpoint: "
                "config.json, *.safetensors, tokenizer.json; without -m hybrid runs its demo "
                "model)");
  if (!fs::is_directory(dir))
    throw Error("[model] " + dir + ": not a folder (pass the folder that holds config.json)");
  if (!fs::exists(fs::path(dir) / "config.json")) {
    const std::string nested = nested_model_folder(dir);
    throw Error("[config] " + dir + ": not a model folder (no config.json); " +
                (nested.empty()
                     ? std::string("pass the folder that holds config.json and the "
                                   "*.safetensors files, e.g. one made by `hf download ORG/NAME "
                                   "--local-dir DIR`")
                     : "did you mean -m " + nested + " ?"));
  }
}

// Progress of a long step on standard error: on a terminal one line redrawn in place (at most
// every 0.1 s); otherwise (a log) a line at most every 2 s, so short steps print nothing.
class Meter {
 public:
  Meter() : tty_(isatty(fileno(stderr)) != 0), last_(std::chrono::steady_clock::now()) {}
  void show(const std::string& text, bool last) {
    if (text == shown_) return;
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    if (tty_) {
      if (since < 0.1 && !last) return;
      std::fprintf(stderr, "\r\033[Khybrid: %s", text.c_str());
      drawn_ = true;
    } else {
      if (since < 2.0 || last) return;
      std::fprintf(stderr, "hybrid: %s\n", text.c_str());
    }
    std::fflush(stderr);
    last_ = now;
    shown_ = text;
  }
  // Clears the redrawn line (on a terminal) before the next message.
  void done() {
    if (drawn_) std::fprintf(stderr, "\r\033[K");
    drawn_ = false;
  }

 private:
  bool tty_;
  bool drawn_ = false;
  std::string shown_;
  std::chrono::steady_clock::time_point last_;
};

std::string percent(int64_t done, int64_t total) {
  return std::to_string(total > 0 ? done * 100 / total : 100) + "%";
}

// Model::load with the weight bytes shown as they are read, one line when done, and what to do
// when the weights do not fit.
std::unique_ptr<Model> load_model(const std::string& dir, Device device) {
  Meter meter;
  int64_t total_bytes = 0;
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<Model> m;
  try {
    m = Model::load(dir, device, [&](int64_t done, int64_t total) {
      total_bytes = total;
      meter.show("loading " + dir + ": " + format_bytes(done) + " / " + format_bytes(total) + " (" +
                     percent(done, total) + ")",
                 done == total);
    });
  } catch (const Error& e) {
    meter.done();
    const std::string what = e.what();
    if (what.find("the weights need") == std::string::npos &&
        what.find("out of memory") == std::string::npos)
      throw;
    throw Error(what + "; " +
                (device.is_cuda()
                     ? "run it on the CPU (--device cpu), free the GPU (nvidia-smi lists what "
                       "holds it), or use a smaller checkpoint"
                     : "use a smaller checkpoint or a machine with more memory"));
  }
  meter.done();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "hybrid: loaded %s of weights onto %s in %.2f s\n",
               format_bytes(total_bytes).c_str(), to_string(device).c_str(), s);
  return m;
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
  check_model_folder(dir);
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
  // One device holds every layer: the whole weight set on cpu, or on one cuda device, counted as
  // the load keeps it (MLX-quantized weights dequantized, the routed experts possibly not).
  const WeightMemory memory = ckpt ? weight_memory(spec, *ckpt) : WeightMemory{total, total, total};
  if (memory.loaded == memory.stored) {
    std::printf("memory        %s on the device (all weights on one device)\n",
                format_bytes(memory.loaded).c_str());
  } else {
    std::printf("memory        %s on the device with the MLX-quantized weights dequantized at load",
                format_bytes(memory.loaded).c_str());
    if (memory.experts_kept < memory.loaded)
      std::printf(
          "; %s with the routed experts kept quantized (automatic when %s does not fit; "
          "HYBRID_KEEP_QUANTIZED_EXPERTS=1 always)",
          format_bytes(memory.experts_kept).c_str(), format_bytes(memory.loaded).c_str());
    std::printf("\n");
  }

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

// The escapes of llama.cpp's --escape: backslash + n, t, r, backslash or quote become newline, tab,
// carriage return, backslash, quote; other backslashes stay as they are.
std::string unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    const char next = i + 1 < s.size() ? s[i + 1] : '\0';
    if (s[i] == '\\' &&
        (next == 'n' || next == 't' || next == 'r' || next == '\\' || next == '"')) {
      out += next == 'n' ? '\n' : next == 't' ? '\t' : next == 'r' ? '\r' : next;
      ++i;
    } else {
      out += s[i];
    }
  }
  return out;
}

struct RunOptions {
  std::string model;
  std::optional<std::string> prompt;
  std::vector<std::string> batch;  // two or more prompts: run as one batch (run_batch)
  std::optional<std::vector<int32_t>> ids;
  int64_t n = 256;
  int64_t ctx = 0;            // 0: the model's max_position_embeddings
  int64_t prefill_chunk = 0;  // 0: Model::default_prefill_chunk
  SamplingParams sampling;
  bool chat = false;
  bool print_ids = false;
  std::vector<std::string> stops;
  Device device = Device::cpu();
  bool cuda_graphs = true;
};

// "prompt eval time =    12.34 ms /    80 tokens (    0.15 ms per token,  6481.20 tokens per
// second)", llama.cpp's llama_perf_context_print line.
void print_timing(const char* what, double seconds, int64_t count, const char* unit) {
  const double ms = seconds * 1e3;
  std::fprintf(
      stderr,
      "hybrid: %16s = %10.2f ms / %5lld %-6s (%8.2f ms per token, %8.2f tokens per second)\n", what,
      ms, static_cast<long long>(count), unit, count > 0 ? ms / count : 0.0,
      seconds > 0 ? count / seconds : 0.0);
}

// EOS: config.json / generation_config.json; ChatML's end of turn with --chat; else the
// tokenizer's end-of-text token when the config names none.
std::vector<int32_t> stop_ids(const RunOptions& o, const Tokenizer* tok) {
  std::vector<int32_t> eos = eos_token_ids(o.model);
  auto add_eos_token = [&](const char* name) {
    if (!tok) return;
    std::optional<int32_t> id = tok->token_to_id(name);
    if (id && std::find(eos.begin(), eos.end(), *id) == eos.end()) eos.push_back(*id);
  };
  if (o.chat) add_eos_token("<|im_end|>");
  if (eos.empty()) {
    add_eos_token("<|endoftext|>");
    add_eos_token("</s>");
  }
  return eos;
}

// The prompt on one line for a label: newlines as \n, cut to 60 characters.
std::string one_line(const std::string& text) {
  std::string s;
  for (char c : text) s += c == '\n' ? std::string("\\n") : std::string(1, c);
  return s.size() > 60 ? s.substr(0, 57) + "..." : s;
}

// Several prompts as one batch (Model::generate_batch): each prompt's text and ids are checked
// like run()'s single prompt, then the continuations are printed in prompt order, each under a
// label, and the timings of the whole batch go to standard error.
int run_batch(const RunOptions& o) {
  const Sampler checked(o.sampling);
  check_model_folder(o.model);
  if (!fs::exists(fs::path(o.model) / "tokenizer.json"))
    throw Error(o.model + ": no tokenizer.json (needed for -p; pass token ids with --ids)");
  const Tokenizer tok = Tokenizer::from_file(o.model);
  const Config cfg = load_config(o.model);
  const int64_t ctx = o.ctx > 0 ? o.ctx : cfg.max_position_embeddings;
  std::vector<std::vector<int32_t>> prompts;
  int64_t longest = 0, prompt_tokens = 0;
  for (size_t b = 0; b < o.batch.size(); ++b) {
    std::vector<int32_t> ids = tok.encode(o.chat ? chatml_prompt(o.batch[b]) : o.batch[b]);
    const std::string which = "prompt " + std::to_string(b + 1);
    if (ids.empty()) throw Error(which + " is empty (it encodes to no tokens)");
    const int64_t P = static_cast<int64_t>(ids.size());
    if (ctx > 0 && P > ctx)
      throw Error(which + " has " + std::to_string(P) + " tokens, more than the context (" +
                  std::to_string(ctx) + ")");
    longest = std::max(longest, P);
    prompt_tokens += P;
    prompts.push_back(std::move(ids));
  }
  const std::vector<int32_t> eos = stop_ids(o, &tok);
  std::vector<StopChecker> stops;
  std::vector<IncrementalDecoder> texts;
  std::vector<std::string> outputs(prompts.size());
  for (size_t b = 0; b < prompts.size(); ++b) {
    stops.emplace_back(StopParams{.eos_ids = eos, .stop_strings = o.stops, .max_tokens = o.n});
    texts.emplace_back(tok, true);
  }

  std::unique_ptr<Model> m = load_model(o.model, o.device);
  m->set_cuda_graphs(o.cuda_graphs);
  GenerateOptions g;
  g.max_new_tokens = o.n;
  g.capacity = ctx > 0 ? std::min(ctx, longest + std::max<int64_t>(o.n, 1)) : 0;
  g.prefill_chunk = o.prefill_chunk;
  g.sampling = o.sampling;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<GenerateResult> res = m->generate_batch(prompts, g, [&](size_t b, int32_t id) {
    StopChecker::Result r = stops[b].push(id, texts[b].push(id));
    outputs[b] += r.emit;
    return !r.stop;
  });
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  int64_t generated = 0, steps = 0;
  double prefill = 0;
  for (size_t b = 0; b < prompts.size(); ++b) {
    outputs[b] += stops[b].finish(texts[b].flush());
    generated += static_cast<int64_t>(res[b].ids.size());
    steps = std::max(steps, res[b].decode_steps);
    prefill += res[b].prefill_seconds;
    if (o.print_ids) {
      std::string line;
      for (size_t i = 0; i < res[b].ids.size(); ++i)
        line += (i ? " " : "") + std::to_string(res[b].ids[i]);
      std::printf("%s\n", line.c_str());
    } else {
      std::printf("--- [%zu/%zu] %s ---\n%s\n", b + 1, prompts.size(), one_line(o.batch[b]).c_str(),
                  outputs[b].c_str());
    }
  }
  std::fflush(stdout);
  std::fprintf(stderr, "\nhybrid: %zu prompts, %lld prompt tokens, %lld generated\n",
               prompts.size(), static_cast<long long>(prompt_tokens),
               static_cast<long long>(generated));
  for (size_t b = 0; b < prompts.size(); ++b) {
    const char* reason = res[b].context_full ? "context full" : to_string(stops[b].reason());
    if (!res[b].context_full && stops[b].reason() == StopReason::none) reason = "max_tokens";
    std::fprintf(stderr, "hybrid: [%zu] %lld prompt tokens, %lld generated, stop: %s\n", b + 1,
                 static_cast<long long>(prompts[b].size()),
                 static_cast<long long>(res[b].ids.size()), reason);
  }
  print_timing("prompt eval time", prefill, prompt_tokens, "tokens");
  // Every batched step samples one token per live sequence: tokens per second counts them all.
  const double decode_s = res.front().decode_seconds;
  print_timing("eval time", decode_s, steps, "runs");
  std::fprintf(
      stderr, "hybrid: %16s = %10.2f tokens per second over the batch\n", "eval rate",
      decode_s > 0
          ? static_cast<double>(generated - static_cast<int64_t>(prompts.size())) / decode_s
          : 0.0);
  std::fprintf(stderr, "hybrid: %16s = %10.2f ms / %5lld tokens\n", "total time", total * 1e3,
               static_cast<long long>(prompt_tokens + generated));
  return 0;
}

int run(const RunOptions& o) {
  if (!o.batch.empty()) return run_batch(o);
  const Sampler checked(o.sampling);  // bad sampling parameters fail before the model loads
  check_model_folder(o.model);
  const bool has_tokenizer = fs::exists(fs::path(o.model) / "tokenizer.json");
  if (o.prompt && !has_tokenizer)
    throw Error(o.model + ": no tokenizer.json (needed for -p; pass token ids with --ids)");
  if (!o.stops.empty() && !has_tokenizer)
    throw Error(o.model + ": no tokenizer.json (needed for --stop)");
  std::optional<Tokenizer> tok;
  if (has_tokenizer) tok.emplace(Tokenizer::from_file(o.model));

  std::vector<int32_t> prompt;
  if (o.prompt) {
    prompt = tok->encode(o.chat ? chatml_prompt(*o.prompt) : *o.prompt);
    if (prompt.empty()) throw Error("the prompt is empty (it encodes to no tokens)");
  } else {
    prompt = *o.ids;
    if (prompt.empty()) throw Error("--ids gives no token ids");
  }

  // The prompt is checked against the config before the (possibly large) weights are loaded.
  const Config cfg = load_config(o.model);
  const int64_t P = static_cast<int64_t>(prompt.size());
  for (size_t t = 0; t < prompt.size(); ++t)
    if (prompt[t] < 0 || prompt[t] >= cfg.vocab_size)
      throw Error("token id " + std::to_string(prompt[t]) + " at position " + std::to_string(t) +
                  " is out of range [0, " + std::to_string(cfg.vocab_size) + ")");
  const int64_t ctx = o.ctx > 0 ? o.ctx : cfg.max_position_embeddings;
  if (ctx > 0 && P > ctx) {
    const std::string which =
        o.ctx > 0 ? "the context size (-c " + std::to_string(o.ctx) + ")"
                  : "the model's context (max_position_embeddings " + std::to_string(ctx) + ")";
    throw Error("the prompt has " + std::to_string(P) + " tokens, more than " + which);
  }

  const std::vector<int32_t> eos = stop_ids(o, tok ? &*tok : nullptr);

  StopChecker stop({.eos_ids = eos, .stop_strings = o.stops, .max_tokens = o.n});
  // The text is decoded whenever there is a tokenizer (stop strings match it); it is printed
  // unless --print-ids.
  std::optional<IncrementalDecoder> text;
  if (tok) text.emplace(*tok, true);
  const bool show_text = tok && !o.print_ids;

  const bool show_ids = o.print_ids || !tok;
  if (!tok && !o.print_ids)
    std::fprintf(stderr, "hybrid: %s has no tokenizer.json: printing the generated ids\n",
                 o.model.c_str());

  std::unique_ptr<Model> m = load_model(o.model, o.device);
  m->set_cuda_graphs(o.cuda_graphs);
  // On a terminal the prompt's text comes first, as llama-cli shows it (written with the first
  // text, after the prefill progress line is gone); a pipe gets only the continuation.
  bool echo_prompt = show_text && o.prompt && !o.chat && isatty(fileno(stdout));
  auto write_text = [&](const std::string& s) {
    if (echo_prompt) {
      std::fwrite(o.prompt->data(), 1, o.prompt->size(), stdout);
      echo_prompt = false;
    }
    std::fwrite(s.data(), 1, s.size(), stdout);
    std::fflush(stdout);
  };
  GenerateOptions g;
  g.max_new_tokens = o.n;
  g.capacity = ctx > 0 ? std::min(ctx, P + std::max<int64_t>(o.n, 1)) : 0;
  g.prefill_chunk = o.prefill_chunk;
  g.sampling = o.sampling;
  Meter prefill_meter;
  if (P > m->prefill_piece(o.prefill_chunk))
    g.on_prefill = [&](int64_t done, int64_t total) {
      prefill_meter.show("prefill " + std::to_string(done) + " / " + std::to_string(total) +
                             " prompt tokens (" + percent(done, total) + ")",
                         done == total);
      if (done == total) prefill_meter.done();
    };
  g.on_token = [&](int32_t id) {
    StopChecker::Result r = stop.push(id, text ? text->push(id) : std::string());
    if (show_text && !r.emit.empty()) write_text(r.emit);
    return !r.stop;
  };
  const auto t0 = std::chrono::steady_clock::now();
  GenerateResult res = m->generate(prompt, g);
  const double total = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const std::string tail = stop.finish(text ? text->flush() : std::string());
  if (show_text) {
    write_text(tail);
    std::printf("\n");
  }
  if (show_ids) {
    std::string line;
    for (size_t i = 0; i < res.ids.size(); ++i) line += (i ? " " : "") + std::to_string(res.ids[i]);
    std::printf("%s\n", line.c_str());
  }
  std::fflush(stdout);

  const char* reason = res.context_full ? "context full" : to_string(stop.reason());
  if (!res.context_full && stop.reason() == StopReason::none) reason = "max_tokens";
  std::fprintf(stderr, "\nhybrid: %lld prompt tokens, %lld generated, stop: %s\n",
               static_cast<long long>(P), static_cast<long long>(res.ids.size()), reason);
  print_timing("prompt eval time", res.prefill_seconds, P, "tokens");
  print_timing("eval time", res.decode_seconds, res.decode_steps, "runs");
  std::fprintf(stderr, "hybrid: %16s = %10.2f ms / %5lld tokens\n", "total time", total * 1e3,
               static_cast<long long>(P + static_cast<int64_t>(res.ids.size())));
  return 0;
}

struct BenchOptions {
  std::string model;
  int64_t pp = 512, tg = 128, reps = 3, prefill_chunk = 0;
  Device device = Device::cpu();
  bool cuda_graphs = true;
};

// mean and sample standard deviation (n - 1; 0 for one value), as llama-bench reports them.
std::pair<double, double> mean_stddev(const std::vector<double>& v) {
  double mean = 0;
  for (double x : v) mean += x;
  mean /= static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  const double sd = v.size() > 1 ? std::sqrt(var / static_cast<double>(v.size() - 1)) : 0.0;
  return {mean, sd};
}

int bench(const BenchOptions& o) {
  check_model_folder(o.model);
  const Config cfg = load_config(o.model);
  std::unique_ptr<Model> m = load_model(o.model, o.device);
  m->set_cuda_graphs(o.cuda_graphs);
  const Checkpoint ckpt(o.model);
  const ModelSpec spec = describe_model(cfg, detect_layout(cfg, ckpt));
  int64_t bytes = 0;
  for (const auto& [t, b] : checkpoint_weight_bytes(spec, ckpt)) bytes += b;
  const int64_t ctx = m->max_context();
  for (int64_t len : {o.pp, o.tg + 1})
    if (ctx > 0 && len > ctx)
      throw Error("bench: " + std::to_string(len) + " tokens exceed the model's context " +
                  "(max_position_embeddings " + std::to_string(ctx) + ")");

  // Random token ids from a fixed seed (the same prompt on every run and machine).
  Xoshiro256 rng(1234);
  auto random_ids = [&](int64_t count) {
    std::vector<int32_t> ids(static_cast<size_t>(count));
    for (int32_t& id : ids)
      id = static_cast<int32_t>(rng.next() % static_cast<uint64_t>(m->vocab_size()));
    return ids;
  };
  const std::vector<int32_t> pp_ids = random_ids(std::max<int64_t>(o.pp, 1));
  const std::vector<int32_t> tg_ids = random_ids(1);

  // pp: the prompt's prefill forward calls; tg: o.tg decode steps after a one-token prompt (greedy
  // ids, so every step is a real decode; the argmax is included, sampling filters are not).
  auto pp_run = [&]() {
    GenerateOptions g;
    g.max_new_tokens = 0;
    g.prefill_chunk = o.prefill_chunk;
    GenerateResult r = m->generate(pp_ids, g);
    return static_cast<double>(o.pp) / r.prefill_seconds;
  };
  auto tg_run = [&]() {
    GenerateOptions g;
    g.max_new_tokens = o.tg + 1;
    GenerateResult r = m->generate(tg_ids, g);
    return static_cast<double>(r.decode_steps) / r.decode_seconds;
  };

  const std::string backend = o.device.is_cpu() ? "CPU" : "CUDA";
  // "mamba2 123.9K": the architecture and its size, as llama-bench's model column
  std::string name = std::string(arch_name(cfg.arch)) + " " + human_count(spec.parameters());
  name.erase(name.rfind(' '), 1);
  std::printf("| model | size | params | backend | test | t/s |\n");
  std::printf("| --- | ---: | ---: | --- | ---: | ---: |\n");
  auto row = [&](const std::string& test, const std::function<double()>& once) {
    once();  // warm-up (first-touch of the weights, allocator, kernel caches)
    std::vector<double> tps;
    for (int64_t r = 0; r < o.reps; ++r) tps.push_back(once());
    const auto [mean, sd] = mean_stddev(tps);
    std::printf("| %s | %s | %s | %s | %s | %.2f ± %.2f |\n", name.c_str(),
                format_bytes(bytes).c_str(), human_count(spec.parameters()).c_str(),
                backend.c_str(), test.c_str(), mean, sd);
    std::fflush(stdout);
  };
  if (o.pp > 0) row("pp" + std::to_string(o.pp), pp_run);
  if (o.tg > 0) row("tg" + std::to_string(o.tg), tg_run);
  return 0;
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
  if (cmd != "info" && cmd != "logits" && cmd != "run" && cmd != "bench")
    return usage_error("unknown command '" + cmd + "'");
  std::string model, kv_dtype = "bf16", out, device_name;
  std::optional<std::vector<int32_t>> ids;
  std::vector<std::string> prompts;  // -p (repeatable) and -f FILE, in order
  RunOptions ro;
  BenchOptions bo;
  const bool gen = cmd == "run";
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
    auto real = [&](const std::string* v, float& dst) {
      if (!v) return false;
      try {
        size_t used = 0;
        dst = std::stof(*v, &used);
        return used == v->size() && std::isfinite(dst);
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
    } else if (a == "--ids" && (cmd == "logits" || gen)) {
      const std::string* v = value();
      if (!v) return usage_error("--ids needs a list like 1,2,3");
      ids = parse_ids(*v);
      if (!ids) return usage_error("--ids must be comma-separated integers, got '" + *v + "'");
    } else if ((a == "-p" || a == "--prompt") && gen) {
      const std::string* v = value();
      if (!v) return usage_error(a + " needs a text");
      prompts.push_back(*v);
    } else if ((a == "-f" || a == "--file") && gen) {
      const std::string* v = value();
      if (!v) return usage_error(a + " needs a file of prompts (one per line)");
      std::FILE* f = std::fopen(v->c_str(), "rb");
      if (!f) {
        std::fprintf(stderr, "error: %s: cannot open the prompt file\n", v->c_str());
        return 1;
      }
      std::string text;
      char buf[4096];
      for (size_t got; (got = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, got);
      std::fclose(f);
      size_t before = prompts.size();
      for (size_t i = 0; i < text.size();) {
        size_t nl = std::min(text.find('\n', i), text.size());
        std::string line = text.substr(i, nl - i);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        if (!line.empty()) prompts.push_back(line);
        i = nl + 1;
      }
      if (prompts.size() == before) {
        std::fprintf(stderr, "error: %s: no prompts (every line is empty)\n", v->c_str());
        return 1;
      }
    } else if (a == "--no-graph" && (gen || cmd == "bench")) {
      ro.cuda_graphs = bo.cuda_graphs = false;
    } else if ((a == "-p" || a == "--n-prompt") && cmd == "bench") {
      if (!integer(value(), bo.pp)) return usage_error(a + " needs a count >= 0");
    } else if (a == "--out" && cmd == "logits") {
      const std::string* v = value();
      if (!v) return usage_error("--out needs a file name");
      out = *v;
    } else if (a == "--device" && cmd != "info") {
      const std::string* v = value();
      if (!v) return usage_error("--device needs cpu or cuda");
      device_name = *v;
    } else if ((a == "-n" || a == "--n-predict") && gen) {
      if (!integer(value(), ro.n)) return usage_error(a + " needs a count >= 0");
    } else if ((a == "-n" || a == "--n-gen") && cmd == "bench") {
      if (!integer(value(), bo.tg)) return usage_error(a + " needs a count >= 0");
    } else if ((a == "-r" || a == "--repetitions") && cmd == "bench") {
      if (!integer(value(), bo.reps) || bo.reps == 0)
        return usage_error(a + " needs a positive count");
    } else if ((a == "-c" || a == "--ctx-size") && gen) {
      if (!integer(value(), ro.ctx) || ro.ctx == 0)
        return usage_error(a + " needs a positive count");
    } else if (a == "--prefill-chunk" && (gen || cmd == "bench")) {
      int64_t c = 0;
      if (!integer(value(), c) || c == 0)
        return usage_error("--prefill-chunk needs a positive count");
      ro.prefill_chunk = bo.prefill_chunk = c;
    } else if (a == "--temp" && gen) {
      if (!real(value(), ro.sampling.temperature)) return usage_error("--temp needs a number");
    } else if (a == "--top-k" && gen) {
      int64_t k = 0;
      if (!integer(value(), k) || k > INT32_MAX) return usage_error("--top-k needs a count >= 0");
      ro.sampling.top_k = static_cast<int>(k);
    } else if (a == "--top-p" && gen) {
      if (!real(value(), ro.sampling.top_p)) return usage_error("--top-p needs a number");
    } else if (a == "--min-p" && gen) {
      if (!real(value(), ro.sampling.min_p)) return usage_error("--min-p needs a number");
    } else if (a == "--repeat-penalty" && gen) {
      if (!real(value(), ro.sampling.repetition_penalty))
        return usage_error("--repeat-penalty needs a number");
    } else if (a == "--seed" && gen) {
      int64_t seed = 0;
      if (!integer(value(), seed)) return usage_error("--seed needs an integer >= 0");
      ro.sampling.seed = static_cast<uint64_t>(seed);
    } else if (a == "--chat" && gen) {
      ro.chat = true;
    } else if (a == "--stop" && gen) {
      const std::string* v = value();
      if (!v || v->empty()) return usage_error("--stop needs a non-empty text");
      ro.stops.push_back(unescape(*v));
    } else if (a == "--print-ids" && gen) {
      ro.print_ids = true;
    } else {
      return usage_error("unknown option '" + a + "' for " + cmd);
    }
  }
  if (model.empty()) {
    // The bundled demo model, on the GPU when there is one (unless --device says otherwise).
    model = demo_model_dir();
    if (device_name.empty()) device_name = cuda_device_count() > 0 ? "cuda" : "cpu";
    if (!fs::exists(fs::path(model) / "config.json")) {
      std::fprintf(stderr,
                   "error: no -m DIR given and the bundled demo model is missing: %s has no "
                   "config.json (it ships in the source tree as models/demo; set "
                   "HYBRID_DEMO_MODEL=DIR or pass -m DIR)\n",
                   model.c_str());
      return 1;
    }
    std::fprintf(stderr, "hybrid: no -m DIR given: using the demo model %s on %s\n", model.c_str(),
                 device_name.c_str());
  }
  if (device_name.empty()) device_name = "cpu";
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
  if (cmd == "logits" && !ids) return usage_error("logits needs --ids 1,2,3");
  if (cmd == "logits" && out.empty()) return usage_error("logits needs --out FILE.npy");
  if (gen && ids.has_value() == !prompts.empty())
    return usage_error("run needs either -p TEXT (or -f FILE) or --ids 1,2,3");
  if (gen && ro.chat && prompts.empty()) return usage_error("--chat needs -p TEXT");
  try {
    const Device device = parse_device(device_name);
    if (gen) {
      ro.model = model;
      if (prompts.size() == 1) ro.prompt = prompts.front();
      if (prompts.size() > 1) ro.batch = prompts;
      ro.ids = ids;
      ro.device = device;
      return run(ro);
    }
    if (cmd == "bench") {
      bo.model = model;
      bo.device = device;
      return bench(bo);
    }
    check_model_folder(model);
    std::unique_ptr<Model> m = load_model(model, device);
    const std::vector<float> l = m->logits(*ids);
    write_npy(out, l, static_cast<int64_t>(ids->size()), m->vocab_size());
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
