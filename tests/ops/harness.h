// The op test harness behind `hybrid-ops test | perf`, in the spirit of llama.cpp's
// test-backend-ops.
//
// A Case makes named slots (host tensors with their initial contents), runs the public op API on
// views of them, and states the f64 oracle of its outputs. The runner:
//   - fills inputs from a fixed, printed seed (the case keeps them in the op's valid domain);
//   - copies every slot to the backend with guard bytes after it, and fills outputs with a
//     sentinel; after the run the guard bytes and every byte of an output's storage outside its
//     view must be unchanged (catches out-of-bounds and stray writes);
//   - backend cpu is compared with the case's f64 oracle; any other backend with the CPU backend
//     on the same inputs;
//   - per output: NaN/Inf positions must agree, then nmse = Σ(a-b)²/Σb² and max|a-b| (scaled by
//     max(1, max|b|)) must be within the tolerance of the output's dtype;
//   - a call no kernel of the backend supports (hybrid::Unsupported) is a SKIP, listed.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "hybrid/core/context.h"
#include "hybrid/core/error.h"
#include "hybrid/core/tensor.h"

namespace hybrid::test {

// Deterministic generator (splitmix64): same seed, same numbers, on every machine.
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next_u64();
  double uniform(double lo = 0.0, double hi = 1.0);  // [lo, hi)
  double normal(double mean = 0.0, double stddev = 1.0);
  int64_t randint(int64_t lo, int64_t hi);  // [lo, hi]

 private:
  uint64_t state_;
};

enum class Role { in, out, inout };

// One named tensor of a case: host storage with its initial contents, and the view the op sees
// (offset, shape and strides in elements into the storage).
struct Slot {
  std::string name;
  Role role = Role::in;
  DType dtype = DType::f32;
  std::vector<int64_t> shape, strides;
  int64_t offset = 0;
  std::vector<uint8_t> storage;

  int64_t numel() const;
  // Element i of the view in row-major logical order, read as double / written with rounding to
  // the slot's dtype.
  double get(int64_t i) const;
  void set(int64_t i, double v);
  std::vector<double> values() const;  // the whole view in logical order
  // Host view of the storage (for an oracle that wants a Tensor).
  Tensor host_view() const;
  int64_t storage_offset(int64_t i) const;  // storage element of logical element i
};

class Slots {
 public:
  // A contiguous slot.
  Slot& input(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  Slot& output(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  Slot& inout(const std::string& name, DType dtype, const std::vector<int64_t>& shape);
  // A strided view into a larger storage of `storage_elems` elements (gaps get random bytes).
  Slot& strided(const std::string& name, Role role, DType dtype, const std::vector<int64_t>& shape,
                const std::vector<int64_t>& strides, int64_t offset, int64_t storage_elems);

  Slot& operator[](const std::string& name);
  const Slot& operator[](const std::string& name) const;
  bool has(const std::string& name) const;
  std::deque<Slot>& all() { return slots_; }
  const std::deque<Slot>& all() const { return slots_; }

 private:
  Slot& add(Slot s);
  std::deque<Slot> slots_;  // a deque: references returned by add() stay valid
};

// Input fillers (values rounded to the slot's dtype).
void fill_uniform(Slot& s, Rng& rng, double lo, double hi);
void fill_normal(Slot& s, Rng& rng, double mean = 0.0, double stddev = 1.0);
void fill_int(Slot& s, Rng& rng, int64_t lo, int64_t hi);  // uniform integers in [lo, hi]
void fill_values(Slot& s, const std::vector<double>& values);
// Uniform in [lo, hi) from a counter-based generator (seed + element index), over all cores: for
// the perf cases' large weights (the MoE case's 3 GiB took ~25 s element by element). A
// contiguous slot only.
void fill_uniform_fast(Slot& s, uint64_t seed, double lo, double hi);

// Views of the slots on the device a case runs on: views["x"].
using Views = std::map<std::string, Tensor>;
// The oracle's expected values per output slot, in logical order.
using Expected = std::map<std::string, std::vector<double>>;

struct Tolerance {
  double nmse = 1e-10;
  double max_abs = 1e-5;  // max|a-b| <= max_abs * max(1, max|ref|)
  bool exact = false;     // integers: every element equal
};
// Default tolerance for an output of `dtype` on `backend` (cpu: against the f64 oracle; other
// backends: against the CPU backend).
Tolerance default_tolerance(DType dtype, DeviceType backend);

class Case {
 public:
  virtual ~Case() = default;
  virtual std::string op() const = 0;      // "rms_norm"
  virtual std::string params() const = 0;  // "T=7,D=4096,w=bf16"
  std::string name() const { return op() + "(" + params() + ")"; }

  // Creates the slots and their initial contents.
  virtual void init(Rng& rng, Slots& slots) = 0;
  // Calls the public op API on views of the slots (all on ctx.device()).
  virtual void run(const Views& views, Context& ctx) = 0;
  // The expected value of every out and inout slot, computed in f64 from the initial slots.
  virtual void oracle(const Slots& slots, Expected& expected) = 0;

  virtual Tolerance tolerance(const Slot& out, DeviceType backend) const {
    return default_tolerance(out.dtype, backend);
  }
  // A case too large for the f64 oracle and the CPU (benchmark shapes): `perf` times it, `test`
  // leaves it out.
  virtual bool perf_only() const { return false; }
  // For perf: bytes the op must move and FLOPs it must do (0 = sum of slot bytes / unknown).
  virtual double bytes(const Slots& slots) const;
  virtual double flops(const Slots& slots) const { return 0.0; }
};

using CaseList = std::vector<std::unique_ptr<Case>>;

// A case from lambdas, for families whose cases differ only in parameters.
struct LambdaCase : Case {
  std::string op_name, param_text;
  std::function<void(Rng&, Slots&)> init_fn;
  std::function<void(const Views&, Context&)> run_fn;
  std::function<void(const Slots&, Expected&)> oracle_fn;
  std::function<Tolerance(const Slot&, DeviceType)> tol_fn;  // optional
  std::function<double(const Slots&)> flops_fn;              // optional

  std::string op() const override { return op_name; }
  std::string params() const override { return param_text; }
  void init(Rng& r, Slots& s) override { init_fn(r, s); }
  void run(const Views& v, Context& c) override { run_fn(v, c); }
  void oracle(const Slots& s, Expected& e) override { oracle_fn(s, e); }
  Tolerance tolerance(const Slot& out, DeviceType b) const override {
    return tol_fn ? tol_fn(out, b) : Case::tolerance(out, b);
  }
  double flops(const Slots& s) const override { return flops_fn ? flops_fn(s) : 0.0; }
};

// Every case of every op family (tests/ops/cases.cpp).
CaseList all_cases();

// ---- the runner ------------------------------------------------------------------------------

struct RunOptions {
  DeviceType backend = DeviceType::cpu;
  std::vector<std::string> ops;  // op names or full case names; empty = all
  uint64_t seed = 42;
  bool verbose = false;
  LogLevel log_level = LogLevel::warn;  // of the contexts the cases run in (--log LEVEL)
  std::string argv0 = "hybrid-ops";
  int jobs = 1;  // test: cases run at once, each on its own thread and contexts (-j)
};

struct Outcome {
  enum Kind { pass, fail, skip } kind = pass;
  std::string detail;
};

// Runs one case on one backend (one fresh set of inputs from seed).
Outcome run_case(Case& c, const RunOptions& opt);
// Seed of a case: the run seed mixed with the case name, so each case has its own inputs.
uint64_t case_seed(uint64_t seed, const std::string& case_name);
bool case_selected(const Case& c, const std::vector<std::string>& ops);

// `hybrid-ops test`: returns the process exit code (0 all passed, 1 failures).
int run_tests(const RunOptions& opt);
// `hybrid-ops perf`.
struct PerfOptions {
  RunOptions run;
  int min_reps = 20;
  double min_seconds = 0.2;
  bool csv = false;
};
int run_perf(const PerfOptions& opt);

}  // namespace hybrid::test
