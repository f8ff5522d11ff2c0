// hybrid-ops: the op test and benchmark tool.
//   hybrid-ops test [-b cpu|cuda] [-o OP|'CASE(params)' ...] [--seed N] [-v]
//   hybrid-ops perf [-b cpu|cuda] [-o ...] [--seed N] [--reps N] [--csv]
// -o takes op names, full case names, and OP:perf (only OP's perf-only cases, the benchmark
// shapes).
//   hybrid-ops list
// `test -b cpu` checks the CPU backend against each case's f64 oracle; `test -b cuda` checks the
// CUDA backend against the CPU backend. Without a GPU, `-b cuda` exits 77 (a skip for CTest).
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "hybrid/core/device.h"
#include "hybrid/core/registry.h"
#include "ops/harness.h"

using namespace hybrid;

namespace {

int usage(const char* argv0) {
  std::fprintf(
      stderr,
      "usage: %s test|perf|list [-b cpu|cuda] [-o OP[,OP...]] [--seed N] [-v] [--reps N] [--csv]\n"
      "       [--log error|warn|info|debug] [-j N]\n"
      "  test   check every case (cpu: against the f64 oracle; cuda: against the CPU backend)\n"
      "  perf   time every case (cuda: after measuring the copy and GEMM ceilings)\n"
      "  list   every op, its kernels per backend and its number of cases\n"
      "  -o     op names, case names 'OP(params)', or OP:perf (only OP's benchmark shapes)\n"
      "  -j     test: N cases at once (default 1; each in its own contexts; output in case "
      "order)\n",
      argv0);
  return 2;
}

std::vector<std::string> split_ops(const std::string& s) {
  // Split on commas that are not inside parentheses (case names contain commas).
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  for (char ch : s) {
    if (ch == '(') ++depth;
    if (ch == ')') --depth;
    if (ch == ',' && depth == 0) {
      if (!cur.empty()) out.push_back(cur);
      cur.clear();
    } else {
      cur += ch;
    }
  }
  if (!cur.empty()) out.push_back(cur);
  return out;
}

int list_ops() {
  std::map<std::string, std::map<std::string, std::vector<std::string>>>
      kernels;  // op -> backend -> names
  for (const KernelInfo& k : Registry::builtin().list())
    kernels[k.op][to_string(k.device)].push_back(k.name);
  std::map<std::string, int> case_count;
  for (auto& c : test::all_cases()) case_count[c->op()]++;
  std::set<std::string> ops;
  for (auto& [op, _] : kernels) ops.insert(op);
  for (auto& [op, _] : case_count) ops.insert(op);
  std::printf("%-28s %-6s %-40s %s\n", "op", "cases", "cpu", "cuda");
  for (const std::string& op : ops) {
    auto join = [](const std::vector<std::string>& v) {
      std::string s;
      for (auto& x : v) s += (s.empty() ? "" : " ") + x;
      return s.empty() ? std::string("-") : s;
    };
    auto& k = kernels[op];
    std::printf("%-28s %-6d %-40s %s\n", op.c_str(), case_count[op], join(k["cpu"]).c_str(),
                join(k["cuda"]).c_str());
  }
  std::printf("cuda backend: %s, %d device(s)\n", cuda_compiled() ? "built" : "not built",
              cuda_device_count());
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage(argv[0]);
  const std::string mode = argv[1];
  test::PerfOptions opt;
  opt.run.argv0 = argv[0];
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "-b") {
      const std::string b = value();
      if (b == "cpu")
        opt.run.backend = DeviceType::cpu;
      else if (b == "cuda")
        opt.run.backend = DeviceType::cuda;
      else
        return usage(argv[0]);
    } else if (a == "-o") {
      for (auto& o : split_ops(value())) opt.run.ops.push_back(o);
    } else if (a == "--seed") {
      opt.run.seed = std::strtoull(value().c_str(), nullptr, 10);
    } else if (a == "-v") {
      opt.run.verbose = true;
    } else if (a == "--log") {
      try {
        opt.run.log_level = parse_log_level(value());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "hybrid-ops: %s\n", e.what());
        return 2;
      }
    } else if (a == "--reps") {
      opt.min_reps = std::atoi(value().c_str());
    } else if (a == "--csv") {
      opt.csv = true;
    } else if (a == "-j") {
      opt.run.jobs = std::atoi(value().c_str());
      if (opt.run.jobs < 1) {
        std::fprintf(stderr, "-j needs a count >= 1\n");
        return 2;
      }
    } else {
      std::fprintf(stderr, "unknown argument '%s'\n", a.c_str());
      return usage(argv[0]);
    }
  }
  try {
    if (mode == "list") return list_ops();
    if (mode == "test") {
      if (opt.run.backend == DeviceType::cuda && cuda_device_count() == 0) {
        std::printf("hybrid-ops test -b cuda: %s; skipping\n",
                    cuda_compiled() ? "no CUDA device present" : "built without CUDA");
        return 77;
      }
      return test::run_tests(opt.run);
    }
    if (mode == "perf") return test::run_perf(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hybrid-ops: %s\n", e.what());
    return 1;
  }
  return usage(argv[0]);
}
