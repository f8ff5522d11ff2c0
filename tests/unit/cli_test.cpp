// The `hybrid` command line (tools/hybrid/main.cpp) run as a user runs it, on the golden tiny
// models of tests/data/models (written by scripts/make_goldens.py with transformers):
//   run --ids --print-ids   == golden.json greedy_ids (prompt_ids as the prompt)
//   run with a seed         reproducible; another seed gives another continuation
//   run -p / --stop         the text path, with tests/data/tokenizer/neox_vocab512.json (neox.json
//                           cut to ids < 512, the goldens' vocab) copied next to the model
//   errors                  prompt longer than the context, ids out of range, missing folder,
//                           -p without tokenizer.json: one line "error: ...", exit code 1
//   several prompts         -p repeated / -f FILE: one batch, each continuation labelled, equal
//                           to the prompt run alone
//   bench                   the llama-bench table with pp and tg rows
//   without -m              the demo model ($HYBRID_DEMO_MODEL here); its absence is an error
//   newcomer errors         say what to do (what -m takes; the nested folder that holds the model;
//                           weights larger than the memory: a sparse 1 TiB checkpoint)
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <regex>
#include <sstream>
#include <string>
#include <vector>
#include "test_files.h"

#include "hybrid/core/dtype.h"
#include "hybrid/model/config.h"
#include "hybrid/model/model.h"

#ifndef HYBRID_CLI_PATH
#error "HYBRID_CLI_PATH (the built hybrid binary) must be defined by tests/CMakeLists.txt"
#endif

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

fs::path data_dir() {
  if (const char* env = std::getenv("HYBRID_TEST_DATA")) return fs::path(env);
  return hybrid::test_files::data_dir();
}

std::string read_text(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

struct CliResult {
  int code = -1;
  std::string out, err;
};

// The hybrid binary under test: $HYBRID_CLI when set (a copy of the build carried elsewhere, as
// scripts/device-check.sh CARRIED=1 runs it), else the one this build made.
std::string cli_path() {
  const char* env = std::getenv("HYBRID_CLI");
  return env && *env ? env : HYBRID_CLI_PATH;
}

// Runs `hybrid <args>` through the shell (with `env`, "NAME='value' ...", set for it); stdout and
// stderr go to temporary files.
CliResult cli(const std::string& args, const std::string& env = "") {
  const fs::path tmp = fs::temp_directory_path();
  const std::string tag = std::to_string(::getpid());
  const fs::path out = tmp / ("hybrid_cli_test_" + tag + ".out");
  const fs::path err = tmp / ("hybrid_cli_test_" + tag + ".err");
  const std::string cmd =
      env + " '" + cli_path() + "' " + args + " >'" + out.string() + "' 2>'" + err.string() + "'";
  const int status = std::system(cmd.c_str());
  CliResult r;
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = read_text(out);
  r.err = read_text(err);
  fs::remove(out);
  fs::remove(err);
  return r;
}

std::string join(const std::vector<int32_t>& ids, const char* sep) {
  std::string s;
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? sep : "") + std::to_string(ids[i]);
  return s;
}

struct Golden {
  fs::path dir;
  std::vector<int32_t> prompt, greedy;
};

Golden golden(const std::string& name) {
  Golden g;
  g.dir = data_dir() / "models" / name;
  const json j = json::parse(read_text(g.dir / "golden.json"));
  g.prompt = j.at("prompt_ids").get<std::vector<int32_t>>();
  g.greedy = j.at("greedy_ids").get<std::vector<int32_t>>();
  return g;
}

// A copy of a golden model's folder with the 512-token test tokenizer as tokenizer.json.
fs::path model_with_tokenizer(const std::string& name) {
  const fs::path dir = fs::temp_directory_path() / ("hybrid_cli_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  for (const char* f : {"config.json", "model.safetensors"})
    fs::copy_file(data_dir() / "models" / name / f, dir / f);
  fs::copy_file(data_dir() / "tokenizer" / "neox_vocab512.json", dir / "tokenizer.json");
  return dir;
}

// The single line of stdout, without its newline.
std::string line(const std::string& out) {
  EXPECT_FALSE(out.empty());
  EXPECT_EQ(out.back(), '\n');
  EXPECT_EQ(out.find('\n'), out.size() - 1) << "more than one line: " << out;
  return out.substr(0, out.find('\n'));
}

class CliGreedy : public ::testing::TestWithParam<std::string> {};

TEST_P(CliGreedy, PrintIdsIsTheGoldenGreedyContinuation) {
  const Golden g = golden(GetParam());
  const CliResult r = cli("run -m '" + g.dir.string() + "' --ids " + join(g.prompt, ",") + " -n " +
                          std::to_string(g.greedy.size()) + " --print-ids --prefill-chunk 64");
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line(r.out), join(g.greedy, " "));
  EXPECT_NE(r.err.find("prompt eval time"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(std::to_string(g.prompt.size()) + " tokens"), std::string::npos) << r.err;
}

INSTANTIATE_TEST_SUITE_P(Goldens, CliGreedy,
                         ::testing::Values("mamba2_g2", "nemotron_h_all", "qwen3_5_dense",
                                           "qwen3_5_moe", "qwen3_next_gva2_k64",
                                           "qwen3_next_gva3_k128_v64"));

TEST(Cli, SamplingWithASeedIsReproducible) {
  const Golden g = golden("qwen3_next_gva2_k64");
  const std::string base = "run -m '" + g.dir.string() + "' --ids " + join(g.prompt, ",") +
                           " -n 24 --print-ids --temp 1.5 --top-k 100 --top-p 0.95 ";
  const CliResult a = cli(base + "--seed 7");
  const CliResult b = cli(base + "--seed 7");
  const CliResult c = cli(base + "--seed 8");
  ASSERT_EQ(a.code, 0) << a.err;
  ASSERT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(line(a.out), line(b.out));
  EXPECT_NE(line(a.out), line(c.out));
  EXPECT_NE(line(a.out), join(std::vector<int32_t>(g.greedy.begin(), g.greedy.end()), " "));
  // 24 ids, each in the vocab
  std::istringstream s(line(a.out));
  int count = 0;
  for (int id = 0; s >> id; ++count) EXPECT_TRUE(id >= 0 && id < 512) << id;
  EXPECT_EQ(count, 24);
}

TEST(Cli, PromptTextStreamsAndStopsAtAStopString) {
  const fs::path dir = model_with_tokenizer("qwen3_next_gva2_k64");
  const std::string base = "run -m '" + dir.string() + "' -p 'Hello world' -n 40 ";
  const CliResult full = cli(base);
  ASSERT_EQ(full.code, 0) << full.err;
  ASSERT_GT(full.out.size(), 3u);
  // A stop string taken from the second half of the free-running text (two ASCII letters, safe
  // to quote): the output is cut just before its first occurrence.
  const std::string text = full.out.substr(0, full.out.size() - 1);
  size_t cut = text.size() / 2;
  while (cut + 1 < text.size() && !(std::isalpha(static_cast<unsigned char>(text[cut])) &&
                                    std::isalpha(static_cast<unsigned char>(text[cut + 1]))))
    ++cut;
  ASSERT_LT(cut + 1, text.size()) << "no two ASCII letters in a row in " << text;
  const std::string stop = text.substr(cut, 2);
  const size_t first = text.find(stop);
  const CliResult stopped = cli(base + "--stop '" + stop + "'");
  ASSERT_EQ(stopped.code, 0) << stopped.err;
  EXPECT_EQ(stopped.out, text.substr(0, first) + "\n");
  EXPECT_NE(stopped.err.find("stop: stop_string"), std::string::npos) << stopped.err;
  // The ids of the same run stop at the token that completed the stop string.
  const CliResult ids = cli(base + "--stop '" + stop + "' --print-ids");
  ASSERT_EQ(ids.code, 0) << ids.err;
  std::istringstream s(line(ids.out));
  int count = 0;
  for (int id = 0; s >> id;) ++count;
  EXPECT_GT(count, 0);
  EXPECT_LT(count, 40);
  fs::remove_all(dir);
}

// The ids of `greedy` up to and including the first occurrence of `eos`.
std::vector<int32_t> until(const std::vector<int32_t>& greedy, int32_t eos) {
  auto it = std::find(greedy.begin(), greedy.end(), eos);
  return std::vector<int32_t>(greedy.begin(), it + 1);
}

TEST(Cli, GenerationStopsAtTheConfigsEosIds) {
  const Golden g = golden("qwen3_5_dense");
  ASSERT_GE(g.greedy.size(), 8u);
  const fs::path dir = model_with_tokenizer("qwen3_5_dense");
  const std::string args =
      "run -m '" + dir.string() + "' --ids " + join(g.prompt, ",") + " -n 16 --print-ids";
  // config.json eos_token_id as an int
  json cfg = json::parse(read_text(dir / "config.json"));
  cfg["eos_token_id"] = g.greedy[3];
  std::ofstream(dir / "config.json") << cfg.dump();
  CliResult r = cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line(r.out), join(until(g.greedy, g.greedy[3]), " "));
  EXPECT_NE(r.err.find("stop: eos"), std::string::npos) << r.err;
  // generation_config.json eos_token_id as a list, merged with config.json's
  std::ofstream(dir / "generation_config.json")
      << json{{"eos_token_id", json::array({g.greedy[1], 100000})}}.dump();
  r = cli(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line(r.out), join(until(g.greedy, g.greedy[1]), " "));
  fs::remove_all(dir);
}

TEST(Cli, PromptLongerThanTheContextIsAnError) {
  const Golden g = golden("nemotron_h_all");  // max_position_embeddings 4096
  std::vector<int32_t> long_prompt(4097, 5);
  const CliResult r =
      cli("run -m '" + g.dir.string() + "' --ids " + join(long_prompt, ",") + " -n 1 --print-ids");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("error: the prompt has 4097 tokens, more than the model's context "
                       "(max_position_embeddings 4096)"),
            std::string::npos)
      << r.err;
  const CliResult c = cli("run -m '" + g.dir.string() + "' --ids " + join(g.prompt, ",") +
                          " -n 1 -c 16 --print-ids");
  EXPECT_EQ(c.code, 1);
  EXPECT_NE(c.err.find("error: the prompt has 80 tokens, more than the context size (-c 16)"),
            std::string::npos)
      << c.err;
  EXPECT_TRUE(c.out.empty());
}

TEST(Cli, GenerationStopsWhenTheContextIsFull) {
  const Golden g = golden("mamba2_g2");
  const CliResult r = cli("run -m '" + g.dir.string() + "' --ids " + join(g.prompt, ",") +
                          " -n 16 -c 84 --print-ids");
  ASSERT_EQ(r.code, 0) << r.err;
  // 80 prompt tokens + 4 fed back = 84; the 5th sampled id needs no room.
  EXPECT_EQ(line(r.out), join(std::vector<int32_t>(g.greedy.begin(), g.greedy.begin() + 5), " "));
  EXPECT_NE(r.err.find("stop: context full"), std::string::npos) << r.err;
}

TEST(Cli, UserErrorsExitOneWithOneLine) {
  const fs::path models = data_dir() / "models";
  const std::string m = (models / "mamba2_g2").string();
  auto expect_error = [](const CliResult& r, const std::string& message) {
    EXPECT_EQ(r.code, 1) << r.err;
    EXPECT_NE(r.err.find("error: " + message), std::string::npos) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  };
  expect_error(cli("run -m '" + m + "' --ids 1,512,3 -n 2 --print-ids"),
               "token id 512 at position 1 is out of range [0, 512)");
  expect_error(cli("run -m '" + m + "' --ids 1,-1 -n 2"),
               "token id -1 at position 1 is out of range [0, 512)");
  expect_error(cli("run -m /nonexistent/model --ids 1,2 -n 2"),
               "[model] /nonexistent/model: no such file or directory");
  expect_error(cli("run -m '" + m + "' -p hello -n 2"),
               m + ": no tokenizer.json (needed for -p; pass token ids with --ids)");
  expect_error(cli("run -m '" + m + "' --ids 1,2 -n 2 --temp -1"),
               "[sampling] temperature: expected >= 0 (0 = greedy), got -1");
  const fs::path empty = fs::temp_directory_path() / "hybrid_cli_test_empty";
  fs::create_directories(empty);
  expect_error(cli("run -m '" + empty.string() + "' --ids 1,2 -n 2"),
               "[config] " + empty.string() + ": not a model folder (no config.json)");
  fs::remove_all(empty);
  expect_error(cli("bench -m /nonexistent/model -p 8 -n 2 -r 1"),
               "[model] /nonexistent/model: no such file or directory");
  // usage errors: 2
  EXPECT_EQ(cli("run -m '" + m + "' -n 2").code, 2);
  EXPECT_EQ(cli("run -m '" + m + "' --ids 1,x").code, 2);
  EXPECT_EQ(cli("run -m '" + m + "' --ids 1 -p hi").code, 2);
}

// Several prompts (-p repeated, or -f FILE with one per line) run as one batch: each
// continuation is printed under its label and equals that prompt run alone; --print-ids prints
// one line of ids per prompt, in order.
TEST(Cli, SeveralPromptsRunAsOneBatch) {
  const fs::path dir = model_with_tokenizer("qwen3_5_moe");
  const std::string base = "run -m '" + dir.string() + "' -n 12 ";
  const std::vector<std::string> prompts = {"Hello world", "The cat sat", "1 2 3"};
  std::string batch_args, expected, expected_ids;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const CliResult one = cli(base + "-p '" + prompts[i] + "'");
    ASSERT_EQ(one.code, 0) << one.err;
    ASSERT_EQ(one.out.find("---"), std::string::npos) << "one prompt: no label";
    expected += "--- [" + std::to_string(i + 1) + "/3] " + prompts[i] + " ---\n" + one.out;
    const CliResult ids = cli(base + "-p '" + prompts[i] + "' --print-ids");
    ASSERT_EQ(ids.code, 0) << ids.err;
    expected_ids += ids.out;
    batch_args += "-p '" + prompts[i] + "' ";
  }
  const CliResult batch = cli(base + batch_args);
  ASSERT_EQ(batch.code, 0) << batch.err;
  EXPECT_EQ(batch.out, expected);
  EXPECT_NE(batch.err.find("3 prompts"), std::string::npos) << batch.err;
  const CliResult ids = cli(base + batch_args + "--print-ids");
  ASSERT_EQ(ids.code, 0) << ids.err;
  EXPECT_EQ(ids.out, expected_ids);
  const fs::path file = dir / "prompts.txt";
  std::ofstream(file) << prompts[0] << "\n\n" << prompts[1] << "\r\n" << prompts[2];
  const CliResult from_file = cli(base + "-f '" + file.string() + "'");
  ASSERT_EQ(from_file.code, 0) << from_file.err;
  EXPECT_EQ(from_file.out, expected);
  const CliResult missing = cli(base + "-f '" + (dir / "nope.txt").string() + "'");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("cannot open the prompt file"), std::string::npos) << missing.err;
  fs::remove_all(dir);
}

TEST(Cli, BenchPrintsTheLlamaBenchTable) {
  const CliResult r =
      cli("bench -m '" + (data_dir() / "models" / "qwen3_5_moe").string() + "' -p 32 -n 8 -r 2");
  ASSERT_EQ(r.code, 0) << r.err;
  std::istringstream s(r.out);
  std::vector<std::string> lines;
  for (std::string l; std::getline(s, l);) lines.push_back(l);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0], "| model | size | params | backend | test | t/s |");
  const std::regex row(
      R"(\| qwen3_5_moe [0-9.]+[KMB]? \| [0-9.]+ \S+ \| \S+ \S+ \| CPU \| (pp32|tg8) \| )"
      R"([0-9]+\.[0-9]{2} ± [0-9]+\.[0-9]{2} \|)");
  EXPECT_TRUE(std::regex_match(lines[2], row)) << lines[2];
  EXPECT_TRUE(std::regex_match(lines[3], row)) << lines[3];
  EXPECT_NE(lines[2].find("pp32"), std::string::npos);
  EXPECT_NE(lines[3].find("tg8"), std::string::npos);
}

TEST(Cli, WithoutModelFolderRunsTheDemoModel) {
  // $HYBRID_DEMO_MODEL stands in for models/demo: a golden model, so the ids are known.
  const Golden g = golden("qwen3_next_gva2_k64");
  const std::string env = "HYBRID_DEMO_MODEL='" + g.dir.string() + "'";
  const CliResult r =
      cli("run --ids " + join(g.prompt, ",") + " -n " + std::to_string(g.greedy.size()) +
              " --print-ids --prefill-chunk 64 --device cpu",
          env);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(line(r.out), join(g.greedy, " "));
  EXPECT_NE(r.err.find("no -m DIR given: using the demo model " + g.dir.string() + " on cpu"),
            std::string::npos)
      << r.err;
  // The load reports its weight bytes and device.
  EXPECT_TRUE(std::regex_search(r.err, std::regex(R"(loaded [0-9.]+ \S+ of weights onto cpu in)")))
      << r.err;
  // info without -m describes the same model.
  const CliResult info = cli("info", env);
  ASSERT_EQ(info.code, 0) << info.err;
  EXPECT_NE(info.out.find("architecture  qwen3_next"), std::string::npos) << info.out;

  const CliResult missing = cli("run -p hello", "HYBRID_DEMO_MODEL=/nonexistent/demo");
  EXPECT_EQ(missing.code, 1);
  EXPECT_NE(missing.err.find("error: no -m DIR given and the bundled demo model is missing: "
                             "/nonexistent/demo has no config.json"),
            std::string::npos)
      << missing.err;
  EXPECT_NE(missing.err.find("set HYBRID_DEMO_MODEL=DIR or pass -m DIR"), std::string::npos);
}

TEST(Cli, NewcomerErrorsSayWhatToDo) {
  // A path that does not exist: what -m takes.
  CliResult r = cli("run -m /nonexistent/model -p hello");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("-m takes the folder of a Hugging Face checkpoint: config.json, "
                       "*.safetensors, tokenizer.json"),
            std::string::npos)
      << r.err;
  // The top of a Hugging Face cache entry: the snapshot folder below it is named.
  const fs::path top = fs::temp_directory_path() / "hybrid_cli_test_hf_cache";
  fs::remove_all(top);
  const fs::path snapshot = top / "models--org--name" / "snapshots" / "0123abcd";
  fs::create_directories(snapshot);
  fs::copy_file(data_dir() / "models" / "mamba2_g2" / "config.json", snapshot / "config.json");
  for (const std::string cmd : {"run", "info", "bench"}) {
    r = cli(cmd + " -m '" + top.string() + "'" + (cmd == "run" ? " --ids 1,2" : ""));
    EXPECT_EQ(r.code, 1) << cmd;
    EXPECT_NE(r.err.find("error: [config] " + top.string() +
                         ": not a model folder (no config.json); did you mean -m " +
                         snapshot.string() + " ?"),
              std::string::npos)
        << cmd << ": " << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
  }
  // A folder with no model anywhere below: how to get one.
  fs::remove_all(top / "models--org--name");
  r = cli("run -m '" + top.string() + "' --ids 1,2");
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("pass the folder that holds config.json and the *.safetensors files"),
            std::string::npos)
      << r.err;
  fs::remove_all(top);
}

// A model folder whose safetensors file declares every tensor of `config_json`'s architecture
// (names and shapes from describe_model, bf16) over a sparse file: no disk space, any size.
fs::path sparse_model(const std::string& name, const std::string& config_json) {
  const fs::path dir = fs::temp_directory_path() / ("hybrid_cli_test_" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << config_json;
  const hybrid::ModelSpec spec = hybrid::describe_model(hybrid::load_config(dir.string()));
  json header = json::object();
  int64_t offset = 0;
  for (const hybrid::TensorSpec& t : spec.tensors) {
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    header[t.name] = {
        {"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + 2 * n}}};
    offset += 2 * n;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  std::ofstream f(dir / "model.safetensors", std::ios::binary);
  const uint64_t len = text.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((len >> (8 * i)) & 0xff));
  f << text;
  f.close();
  fs::resize_file(dir / "model.safetensors", 8 + text.size() + static_cast<uint64_t>(offset));
  return dir;
}

TEST(Cli, WeightsLargerThanMemorySayWhatToDo) {
  // Mamba2 with a 2^27 x 4096 bf16 embedding: 1 TiB of weights (and ~70 M more), more than any
  // test machine has.
  const fs::path dir = sparse_model("too_big", R"({"model_type": "mamba2", "hidden_size": 4096,
      "num_hidden_layers": 1, "vocab_size": 134217728, "num_heads": 128, "head_dim": 64,
      "state_size": 16, "n_groups": 1, "expand": 2, "conv_kernel": 4, "chunk_size": 64,
      "tie_word_embeddings": true})");
  const CliResult r = cli("run -m '" + dir.string() + "' --ids 1,2 -n 2 --device cpu");
  EXPECT_EQ(r.code, 1) << r.err;
  EXPECT_TRUE(std::regex_search(
      r.err,
      std::regex(R"(error: \[model\] the weights need [0-9]+ bytes \(1\.00 TiB\) but cpu has )"
                 R"([0-9]+ bytes \([0-9.]+ [KMGT]iB\) of memory; use a smaller checkpoint or a )"
                 R"(machine with more memory\n$)")))
      << r.err;
  fs::remove_all(dir);
}

}  // namespace
