#include "ops/harness.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "core/cuda_api.h"
#include "hybrid/core/error.h"
#include "hybrid/core/registry.h"

namespace hybrid::test {

// ---- Rng -------------------------------------------------------------------------------------

uint64_t Rng::next_u64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double Rng::uniform(double lo, double hi) {
  return lo + (hi - lo) * (static_cast<double>(next_u64() >> 11) * 0x1.0p-53);
}

double Rng::normal(double mean, double stddev) {
  // Box-Muller; u1 in (0, 1].
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return mean + stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2);
}

int64_t Rng::randint(int64_t lo, int64_t hi) {
  return lo + static_cast<int64_t>(next_u64() % static_cast<uint64_t>(hi - lo + 1));
}

uint64_t case_seed(uint64_t seed, const std::string& case_name) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a
  for (unsigned char ch : case_name) h = (h ^ ch) * 1099511628211ull;
  return seed ^ h;
}

// ---- Slot / Slots ----------------------------------------------------------------------------

int64_t Slot::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t Slot::storage_offset(int64_t i) const {
  int64_t off = offset;
  for (size_t d = shape.size(); d-- > 0;) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

double Slot::get(int64_t i) const {
  return load_element(storage.data(), dtype, storage_offset(i));
}
void Slot::set(int64_t i, double v) {
  store_element(storage.data(), dtype, storage_offset(i), v);
}

std::vector<double> Slot::values() const {
  std::vector<double> v(static_cast<size_t>(numel()));
  for (int64_t i = 0; i < numel(); ++i) v[i] = get(i);
  return v;
}

Tensor Slot::host_view() const {
  auto* base = const_cast<uint8_t*>(storage.data()) + offset * dtype_size(dtype);
  return Tensor(base, dtype, Device::cpu(), shape, strides);
}

Slot& Slots::add(Slot s) {
  for (const Slot& o : slots_)
    if (o.name == s.name) fail("[harness] duplicate slot '", s.name, "'");
  slots_.push_back(std::move(s));
  return slots_.back();
}

namespace {
constexpr uint8_t kOutputSentinel = 0x7f;  // f32/bf16 3.4e38, i32 0x7f7f7f7f: never a valid result
Slot make_slot(const std::string& name, Role role, DType dtype, const std::vector<int64_t>& shape) {
  Slot s;
  s.name = name;
  s.role = role;
  s.dtype = dtype;
  s.shape = shape;
  s.strides = contiguous_strides(shape);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  s.storage.assign(static_cast<size_t>(n) * dtype_size(dtype),
                   role == Role::out ? kOutputSentinel : 0);
  return s;
}
}  // namespace

Slot& Slots::input(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  return add(make_slot(name, Role::in, dtype, shape));
}
Slot& Slots::output(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  return add(make_slot(name, Role::out, dtype, shape));
}
Slot& Slots::inout(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  return add(make_slot(name, Role::inout, dtype, shape));
}

Slot& Slots::strided(const std::string& name, Role role, DType dtype,
                     const std::vector<int64_t>& shape, const std::vector<int64_t>& strides,
                     int64_t offset, int64_t storage_elems) {
  Slot s;
  s.name = name;
  s.role = role;
  s.dtype = dtype;
  s.shape = shape;
  s.strides = strides;
  s.offset = offset;
  s.storage.resize(static_cast<size_t>(storage_elems) * dtype_size(dtype));
  for (size_t i = 0; i < s.storage.size(); ++i) s.storage[i] = static_cast<uint8_t>(i * 151 + 7);
  if (role == Role::out)
    for (int64_t i = 0; i < s.numel(); ++i)
      std::memset(&s.storage[s.storage_offset(i) * dtype_size(dtype)], kOutputSentinel,
                  dtype_size(dtype));
  const int64_t last = s.numel() ? s.storage_offset(s.numel() - 1) : 0;
  if (s.numel() && last >= storage_elems)
    fail("[harness] slot '", name, "' view exceeds its storage");
  return add(std::move(s));
}

Slot& Slots::operator[](const std::string& name) {
  for (Slot& s : slots_)
    if (s.name == name) return s;
  fail("[harness] no slot '", name, "'");
}
const Slot& Slots::operator[](const std::string& name) const {
  return const_cast<Slots&>(*this)[name];
}
bool Slots::has(const std::string& name) const {
  for (const Slot& s : slots_)
    if (s.name == name) return true;
  return false;
}

void fill_uniform(Slot& s, Rng& rng, double lo, double hi) {
  for (int64_t i = 0; i < s.numel(); ++i) s.set(i, rng.uniform(lo, hi));
}
void fill_normal(Slot& s, Rng& rng, double mean, double stddev) {
  for (int64_t i = 0; i < s.numel(); ++i) s.set(i, rng.normal(mean, stddev));
}
void fill_int(Slot& s, Rng& rng, int64_t lo, int64_t hi) {
  for (int64_t i = 0; i < s.numel(); ++i) s.set(i, static_cast<double>(rng.randint(lo, hi)));
}
void fill_uniform_fast(Slot& s, uint64_t seed, double lo, double hi) {
  const int64_t n = s.numel();
  if (s.offset != 0 ||
      static_cast<int64_t>(s.storage.size()) != n * static_cast<int64_t>(dtype_size(s.dtype)))
    fail("[harness] fill_uniform_fast: slot '", s.name, "' is not contiguous");
  // Element i: the first draw of an Rng whose state is i steps past `seed` (splitmix64 is a
  // counter), so the values do not depend on the thread count.
  auto value = [&](int64_t i) {
    return Rng(seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i)).uniform(lo, hi);
  };
  const int64_t threads = std::max(1u, std::thread::hardware_concurrency());
  const int64_t chunk = (n + threads - 1) / threads;
  std::vector<std::thread> pool;
  for (int64_t t = 0; t < threads; ++t)
    pool.emplace_back([&, t] {
      for (int64_t i = t * chunk; i < std::min(n, (t + 1) * chunk); ++i)
        store_element(s.storage.data(), s.dtype, i, value(i));
    });
  for (std::thread& th : pool) th.join();
}
void fill_values(Slot& s, const std::vector<double>& values) {
  if (static_cast<int64_t>(values.size()) != s.numel())
    fail("[harness] fill_values: ", values.size(), " values for slot '", s.name, "' of ",
         s.numel());
  for (int64_t i = 0; i < s.numel(); ++i) s.set(i, values[i]);
}

Tolerance default_tolerance(DType dtype, DeviceType backend) {
  const bool oracle = backend == DeviceType::cpu;
  switch (dtype) {
    case DType::f32:
      return oracle ? Tolerance{1e-10, 1e-5} : Tolerance{1e-8, 1e-4};
    case DType::bf16:
      return oracle ? Tolerance{1e-5, 1e-2} : Tolerance{5e-5, 2e-2};
    case DType::f16:
      return oracle ? Tolerance{1e-6, 1e-3} : Tolerance{1e-5, 2e-3};
    case DType::f64:  // f64 results (softmax_mass): sums in another order, exp within an ulp
      return oracle ? Tolerance{1e-26, 1e-13} : Tolerance{1e-24, 1e-12};
    default:
      return Tolerance{0, 0, true};
  }
}

double Case::bytes(const Slots& slots) const {
  double b = 0;
  for (const Slot& s : slots.all()) {
    const double n = static_cast<double>(s.numel()) * dtype_size(s.dtype);
    b += s.role == Role::inout ? 2 * n : n;  // inout is read and written
  }
  return b;
}

// ---- running a case on a backend -------------------------------------------------------------

namespace {

constexpr size_t kGuardBytes = 256;
uint8_t guard_byte(size_t i) {
  return static_cast<uint8_t>(i * 37 + 11);
}

using Results = std::map<std::string, std::vector<double>>;

// Device copies of every slot with guard bytes after each.
struct Staged {
  std::vector<Buffer> buffers;
  Views views;
};

Staged stage(const Slots& slots, Device dev, Context& ctx) {
  Staged st;
  std::vector<std::vector<uint8_t>> host(slots.all().size());
  for (size_t k = 0; k < slots.all().size(); ++k) {
    const Slot& s = slots.all()[k];
    host[k] = s.storage;
    host[k].resize(s.storage.size() + kGuardBytes);
    for (size_t i = 0; i < kGuardBytes; ++i) host[k][s.storage.size() + i] = guard_byte(i);
    Buffer b(dev, host[k].size());
    copy_bytes(b.data(), dev, host[k].data(), Device::cpu(), host[k].size(), ctx);
    char* base = static_cast<char*>(b.data()) + s.offset * dtype_size(s.dtype);
    st.views[s.name] = Tensor(base, s.dtype, dev, s.shape, s.strides);
    st.buffers.push_back(std::move(b));
  }
  ctx.synchronize();  // `host` dies at return
  return st;
}

// Copies results back; checks guard bytes, bytes outside output views and untouched inputs.
Results collect(const Slots& slots, const Staged& st, Context& ctx,
                std::vector<std::string>& problems) {
  Results out;
  for (size_t k = 0; k < slots.all().size(); ++k) {
    const Slot& s = slots.all()[k];
    std::vector<uint8_t> back(s.storage.size() + kGuardBytes);
    copy_bytes(back.data(), Device::cpu(), st.buffers[k].data(), st.buffers[k].device(),
               back.size(), ctx);
    ctx.synchronize();
    for (size_t i = 0; i < kGuardBytes; ++i)
      if (back[s.storage.size() + i] != guard_byte(i)) {
        problems.push_back(
            str(s.name, ": guard bytes after the tensor were overwritten (at +", i, ")"));
        break;
      }
    const size_t esz = dtype_size(s.dtype);
    const size_t elems = s.storage.size() / esz;
    std::vector<bool> in_view(elems, false);
    if (s.role != Role::in)
      for (int64_t i = 0; i < s.numel(); ++i) in_view[s.storage_offset(i)] = true;
    for (size_t e = 0; e < elems; ++e) {
      if (in_view[e]) continue;
      if (std::memcmp(&back[e * esz], &s.storage[e * esz], esz) != 0) {
        problems.push_back(
            s.role == Role::in
                ? str(s.name, ": an input was modified (storage element ", e, ")")
                : str(s.name, ": storage outside the view was written (element ", e, ")"));
        break;
      }
    }
    if (s.role != Role::in) {
      Slot copy = s;
      copy.storage.assign(back.begin(), back.begin() + s.storage.size());
      out[s.name] = copy.values();
    }
  }
  return out;
}

Results execute(Case& c, const Slots& slots, Device dev, std::vector<std::string>& problems,
                LogLevel log_level, int cpu_threads) {
  Context ctx(dev);
  ctx.set_log_level(log_level);
  ctx.options().cpu_threads = cpu_threads;  // 0 = all; under -j N a share of them
  Staged st = stage(slots, dev, ctx);
  c.run(st.views, ctx);
  ctx.synchronize();
  return collect(slots, st, ctx, problems);
}

std::string index_text(const std::vector<int64_t>& shape, int64_t i) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = i % shape[d];
    i /= shape[d];
  }
  std::string s = "[";
  for (size_t d = 0; d < idx.size(); ++d) s += (d ? "," : "") + std::to_string(idx[d]);
  return s + "]";
}

// Compares one output; returns "" when within tolerance, else what was wrong.
std::string compare(const Slot& slot, const std::vector<double>& got,
                    const std::vector<double>& ref, const Tolerance& tol, std::string& stats) {
  if (got.size() != ref.size())
    return str(slot.name, ": ", got.size(), " values, reference has ", ref.size());
  double err2 = 0, ref2 = 0, max_err = 0, max_ref = 0;
  int64_t worst = -1;
  std::string bad;
  int reported = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double a = got[i], b = ref[i];
    const bool special = std::isnan(a) || std::isnan(b) || std::isinf(a) || std::isinf(b);
    if (special) {
      const bool agree = (std::isnan(a) && std::isnan(b)) || (std::isinf(a) && a == b);
      if (!agree && reported++ < 5)
        bad += str("\n    ", slot.name, index_text(slot.shape, i), ": got ", a, ", expected ", b);
      continue;
    }
    if (tol.exact) {
      if (a != b && reported++ < 5)
        bad += str("\n    ", slot.name, index_text(slot.shape, i), ": got ", a, ", expected ", b);
      continue;
    }
    const double e = std::fabs(a - b);
    err2 += e * e;
    ref2 += b * b;
    max_ref = std::max(max_ref, std::fabs(b));
    if (e > max_err) {
      max_err = e;
      worst = static_cast<int64_t>(i);
    }
  }
  if (reported) return str(slot.name, ": ", reported, " element(s) differ", bad);
  if (tol.exact) return "";
  const double nmse = ref2 > 0 ? err2 / ref2 : err2;
  const double scaled = max_err / std::max(1.0, max_ref);
  stats += str(" ", slot.name, ":nmse=", nmse, ",max=", max_err);
  if (nmse > tol.nmse || scaled > tol.max_abs) {
    std::string msg = str(slot.name, ": nmse ", nmse, " (tolerance ", tol.nmse, "), max|a-b| ",
                          max_err, " scaled ", scaled, " (tolerance ", tol.max_abs, ")");
    if (worst >= 0)
      msg += str("; worst at ", slot.name, index_text(slot.shape, worst), ": got ", got[worst],
                 ", expected ", ref[worst]);
    return msg;
  }
  return "";
}

}  // namespace

bool case_selected(const Case& c, const std::vector<std::string>& ops) {
  if (ops.empty()) return true;
  static const std::string kPerfSuffix = ":perf";  // "OP:perf": only OP's perf-only cases
  for (const std::string& o : ops) {
    if (o == c.op() || o == c.name()) return true;
    if (o.size() > kPerfSuffix.size() && o.ends_with(kPerfSuffix) && c.perf_only() &&
        o.compare(0, o.size() - kPerfSuffix.size(), c.op()) == 0)
      return true;
  }
  return false;
}

Outcome run_case(Case& c, const RunOptions& opt) {
  Slots slots;
  Rng rng(case_seed(opt.seed, c.name()));
  c.init(rng, slots);
  std::vector<std::string> problems;
  Results got, ref;
  const Device dev = opt.backend == DeviceType::cpu ? Device::cpu() : Device::cuda(0);
  // -j N: each case's CPU work gets 1/N of the hardware threads (N OpenMP teams of all of them
  // would oversubscribe the cores N times).
  const int cpu_threads =
      opt.jobs > 1 ? std::max(1, static_cast<int>(std::thread::hardware_concurrency()) / opt.jobs)
                   : 0;
  try {
    if (opt.backend == DeviceType::cpu) {
      got = execute(c, slots, dev, problems, opt.log_level, cpu_threads);
    } else {
      // One CUDA case at a time, also under -j (only the CPU reference and the comparison run
      // side by side): the op library has not been audited for calls from several host threads
      // at once; the shared-memory opt-ins, which could fail each other before, only grow now
      // (ensure_dynamic_smem; docs/ARCHITECTURE.md).
      static std::mutex cuda_mu;
      std::lock_guard<std::mutex> lock(cuda_mu);
      got = execute(c, slots, dev, problems, opt.log_level, cpu_threads);
    }
    if (opt.backend == DeviceType::cpu) {
      c.oracle(slots, ref);
    } else {
      std::vector<std::string> cpu_problems;
      ref = execute(c, slots, Device::cpu(), cpu_problems, LogLevel::warn, cpu_threads);
      for (auto& p : cpu_problems) problems.push_back("cpu reference: " + p);
    }
  } catch (const Unsupported& e) {
    return {Outcome::skip, e.what()};
  } catch (const std::exception& e) {
    return {Outcome::fail, str("threw: ", e.what())};
  }
  std::string stats;
  for (const Slot& s : slots.all()) {
    if (s.role == Role::in) continue;
    auto r = ref.find(s.name);
    if (r == ref.end()) {
      problems.push_back(str(s.name, ": the reference gave no values"));
      continue;
    }
    std::string why = compare(s, got[s.name], r->second, c.tolerance(s, opt.backend), stats);
    if (!why.empty()) problems.push_back(why);
  }
  if (problems.empty()) return {Outcome::pass, stats};
  std::string detail;
  for (auto& p : problems) detail += "\n  " + p;
  return {Outcome::fail, detail};
}

int run_tests(const RunOptions& opt) {
  CaseList cases = all_cases();
  int passed = 0, failed = 0, skipped = 0;
  std::vector<std::string> skips, fails;
  const char* backend = opt.backend == DeviceType::cpu ? "cpu" : "cuda";
  std::printf("hybrid-ops test -b %s --seed %llu\n", backend,
              static_cast<unsigned long long>(opt.seed));
  std::vector<Case*> selected;
  for (auto& c : cases)
    if (!c->perf_only() && case_selected(*c, opt.ops)) selected.push_back(c.get());
  auto report = [&](const Case& c, const Outcome& o, double ms) {
    switch (o.kind) {
      case Outcome::pass:
        ++passed;
        if (opt.verbose)
          std::printf("  OK    %s [%.0f ms]%s\n", c.name().c_str(), ms, o.detail.c_str());
        break;
      case Outcome::skip:
        ++skipped;
        skips.push_back(c.name() + ": " + o.detail);
        if (opt.verbose) std::printf("  SKIP  %s: %s\n", c.name().c_str(), o.detail.c_str());
        break;
      case Outcome::fail:
        ++failed;
        fails.push_back(c.name());
        std::printf("  FAIL  %s%s\n        reproduce: %s test -b %s -o '%s' --seed %llu\n",
                    c.name().c_str(), o.detail.c_str(), opt.argv0.c_str(), backend,
                    c.name().c_str(), static_cast<unsigned long long>(opt.seed));
        break;
    }
    std::fflush(stdout);
  };
  auto timed_run = [&](Case& c, double& ms) {
    const auto t0 = std::chrono::steady_clock::now();
    Outcome o = run_case(c, opt);
    ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return o;
  };
  const size_t workers =
      std::min<size_t>(static_cast<size_t>(std::max(opt.jobs, 1)), selected.size());
  if (workers <= 1) {
    for (Case* c : selected) {
      double ms = 0;
      const Outcome o = timed_run(*c, ms);
      report(*c, o, ms);
    }
  } else {
    // -j N: N threads take cases in order; each case runs in its own contexts (run_case makes
    // them), so only the report is shared: results are printed in case order as soon as every
    // earlier case has finished (a hung case still names itself by being the next one due).
    std::vector<Outcome> outcomes(selected.size());
    std::vector<double> times(selected.size());
    std::vector<bool> done(selected.size(), false);
    std::atomic<size_t> next{0};
    size_t next_report = 0;
    std::mutex mu;
    auto work = [&] {
      for (size_t i; (i = next.fetch_add(1)) < selected.size();) {
        double ms = 0;
        Outcome o;
        try {
          o = timed_run(*selected[i], ms);
        } catch (const std::exception& e) {  // run_case catches the op's errors; this is the rest
          o = {Outcome::fail, str("threw outside the op: ", e.what())};
        }
        std::lock_guard<std::mutex> lock(mu);
        outcomes[i] = std::move(o);
        times[i] = ms;
        done[i] = true;
        for (; next_report < selected.size() && done[next_report]; ++next_report)
          report(*selected[next_report], outcomes[next_report], times[next_report]);
      }
    };
    std::vector<std::thread> pool;
    for (size_t w = 0; w < workers; ++w) pool.emplace_back(work);
    for (auto& t : pool) t.join();
  }
  if (!skips.empty()) {
    std::printf("skipped:\n");
    for (auto& s : skips) std::printf("  %s\n", s.c_str());
  }
  if (!fails.empty()) {
    std::printf("failed:\n");
    for (auto& s : fails) std::printf("  %s\n", s.c_str());
  }
  std::printf("%d passed, %d failed, %d skipped\n", passed, failed, skipped);
  if (passed + failed + skipped == 0) {
    std::printf("no case matched the selection\n");
    return 1;
  }
  return failed ? 1 : 0;
}

}  // namespace hybrid::test

// ---- perf ------------------------------------------------------------------------------------

namespace hybrid::test {

namespace {

// Empties L2 before a timed rep: by a read of the flush buffer (L2 left clean), or under
// HYBRID_PERF_FLUSH=write by a memset that leaves it full of dirty lines (byte `rep` & 0xff).
void flush_l2(Buffer& l2_flush, bool flush_by_write, int rep, void* stream) {
  if (flush_by_write)
    cuda_api::memset_async(l2_flush.data(), rep & 0xff, l2_flush.bytes(), stream);
  else
    cuda_api::l2_flush_clean(l2_flush.data(), l2_flush.bytes(), stream);
}

// The floor a memory-bound op of this size is held to: a device-to-device copy of bytes / 2
// (read + write = bytes), captured in a CUDA graph and timed exactly as the ops are (L2 flushed
// before each rep, events around the graph replay; median of at least `reps`). The copy ceiling
// in the header is measured on 1 GiB; an op of a few MB cannot reach it (launch, ramp and tail
// are fixed costs), and this column says how close the copy path itself gets at the op's size.
double same_size_copy_us(double bytes, const Device& dev, Context& ctx, Buffer& l2_flush,
                         bool flush_by_write, int reps) {
  const size_t half = (static_cast<size_t>(bytes / 2) + 255) & ~size_t{255};
  if (half == 0) return 0;
  Buffer src(dev, half), dst(dev, half);
  cuda_api::memset_async(src.data(), 1, half, ctx.stream());
  ctx.synchronize();
  cuda_api::graph_capture_begin(ctx.stream());
  try {
    cuda_api::copy_async(dst.data(), src.data(), half, cuda_api::CopyKind::device_to_device,
                         ctx.stream());
  } catch (...) {
    cuda_api::graph_capture_abort(ctx.stream());
    throw;
  }
  // The graph and events are released on every way out (an error below is reported by the
  // caller, which goes on to the next case).
  struct Owned {
    void* graph = nullptr;
    void* e0 = nullptr;
    void* e1 = nullptr;
    ~Owned() {
      if (e0) cuda_api::event_destroy(e0);
      if (e1) cuda_api::event_destroy(e1);
      cuda_api::graph_destroy(graph);
    }
  } owned;
  owned.graph = cuda_api::graph_capture_end(ctx.stream());
  void* const graph = owned.graph;
  cuda_api::graph_launch(graph, ctx.stream());  // warm-up
  owned.e0 = cuda_api::event_create();
  owned.e1 = cuda_api::event_create();
  void* const e0 = owned.e0;
  void* const e1 = owned.e1;
  std::vector<double> us;
  for (int r = 0; r < std::max(reps, 5); ++r) {
    flush_l2(l2_flush, flush_by_write, r, ctx.stream());
    cuda_api::event_record(e0, ctx.stream());
    cuda_api::graph_launch(graph, ctx.stream());
    cuda_api::event_record(e1, ctx.stream());
    us.push_back(1e3 * cuda_api::event_elapsed_ms(e0, e1));
  }
  std::sort(us.begin(), us.end());
  return us[us.size() / 2];
}

}  // namespace

int run_perf(const PerfOptions& opt) {
  const bool cuda = opt.run.backend == DeviceType::cuda;
  if (cuda && cuda_device_count() == 0) {
    std::printf("hybrid-ops perf -b cuda: no CUDA device present\n");
    return 77;
  }
  const Device dev = cuda ? Device::cuda(0) : Device::cpu();
  Context ctx(dev);
  ctx.set_log_level(opt.run.log_level);
  double copy_gbps = 0, gemm_tflops = 0;
  Buffer l2_flush;
  const char* flush_env = std::getenv("HYBRID_PERF_FLUSH");
  const bool flush_by_write = flush_env && std::string(flush_env) == "write";
  if (cuda) {
    char name[256];
    cuda_api::device_name(0, name, sizeof name);
    copy_gbps = cuda_api::measure_copy_gbps(0, ctx.stream());
    gemm_tflops = cuda_api::measure_gemm_tflops(0, ctx.stream());
    std::printf(
        "device %s: copy ceiling %.0f GB/s (read + write), bf16 GEMM ceiling %.0f TFLOP/s\n", name,
        copy_gbps, gemm_tflops);
    l2_flush = Buffer(dev, size_t(256) << 20);  // > the 50 MB L2 of an H100/H200
    cuda_api::memset_async(l2_flush.data(), 0, l2_flush.bytes(), ctx.stream());
    std::printf("L2 flush before each rep: %s\n",
                flush_by_write ? "256 MB memset (HYBRID_PERF_FLUSH=write: leaves L2 dirty)"
                               : "256 MB read (L2 left clean)");
  }
  // CUDA timing: each rep flushes L2 (reads 256 MB, so L2 holds none of the op's data and no
  // dirty lines: cuda_api::l2_flush_clean says why; HYBRID_PERF_FLUSH=write flushes with a memset
  // as triton's do_bench does), records event a, replays a CUDA graph
  // holding the op's launches (captured once after the warm-up), records event b: GPU time per
  // call as the engine's captured decode step sees it, without the host launch latency. An op
  // whose capture fails (it allocates or synchronizes) is timed eager (plain launches between the
  // events, launch latency included) and marked so in the last column with the capture's error.
  // copy(us) / %same: the same-size copy (same_size_copy_us) and the op's time against it; both 0
  // off CUDA and for ops that count no bytes.
  std::map<size_t, double> copy_us_by_bytes;
  if (opt.csv)
    std::printf(
        "case,us_median,us_min,gb_per_s,pct_copy,tflop_per_s,pct_gemm,copy_us,pct_same_copy,bound,"
        "timing\n");
  else
    std::printf("%-64s %10s %10s %9s %6s %9s %6s %8s %6s  %-7s %s\n", "case", "us(med)", "us(min)",
                "GB/s", "%copy", "TFLOP/s", "%gemm", "copy(us)", "%same", "bound", "timing");
  CaseList cases = all_cases();
  for (auto& c : cases) {
    if (!case_selected(*c, opt.run.ops)) continue;
    Slots slots;
    Rng rng(case_seed(opt.run.seed, c->name()));
    c->init(rng, slots);
    std::vector<double> us;
    std::string timing = cuda ? "graph" : "-";
    void* graph = nullptr;
    try {
      Staged st = stage(slots, dev, ctx);
      c->run(st.views, ctx);  // warm-up (and the Unsupported check; grows the workspace)
      ctx.synchronize();
      if (cuda) {
        try {
          cuda_api::graph_capture_begin(ctx.stream());
          try {
            c->run(st.views, ctx);
          } catch (...) {
            cuda_api::graph_capture_abort(ctx.stream());
            throw;
          }
          graph = cuda_api::graph_capture_end(ctx.stream());
        } catch (const std::exception& e) {
          graph = nullptr;
          timing = str("eager (graph capture failed: ", e.what(), ")");
          std::replace(timing.begin(), timing.end(), '\n', ' ');
          ctx.synchronize();
        }
      }
      void* e0 = cuda ? cuda_api::event_create() : nullptr;
      void* e1 = cuda ? cuda_api::event_create() : nullptr;
      const auto start = std::chrono::steady_clock::now();
      while (static_cast<int>(us.size()) < opt.min_reps ||
             std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
                 opt.min_seconds) {
        if (cuda) {
          flush_l2(l2_flush, flush_by_write, static_cast<int>(us.size()), ctx.stream());
          cuda_api::event_record(e0, ctx.stream());
          if (graph)
            cuda_api::graph_launch(graph, ctx.stream());
          else
            c->run(st.views, ctx);
          cuda_api::event_record(e1, ctx.stream());
          us.push_back(1e3 * cuda_api::event_elapsed_ms(e0, e1));
        } else {
          const auto t0 = std::chrono::steady_clock::now();
          c->run(st.views, ctx);
          us.push_back(
              std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0)
                  .count());
        }
        if (us.size() >= 100000) break;
      }
      if (cuda) {
        cuda_api::event_destroy(e0);
        cuda_api::event_destroy(e1);
      }
    } catch (const Unsupported& e) {
      cuda_api::graph_destroy(graph);
      std::printf("%-64s SKIP %s\n", c->name().c_str(), e.what());
      continue;
    }
    cuda_api::graph_destroy(graph);
    std::sort(us.begin(), us.end());
    const double med = us[us.size() / 2], mn = us.front();
    const double gbps = c->bytes(slots) / (med * 1e-6) / 1e9;
    const double tflops = c->flops(slots) / (med * 1e-6) / 1e12;
    const double pct_bw = copy_gbps > 0 ? 100 * gbps / copy_gbps : 0;
    const double pct_mma = gemm_tflops > 0 ? 100 * tflops / gemm_tflops : 0;
    const char* bound = !cuda ? "-" : (pct_mma > pct_bw ? "compute" : "memory");
    double copy_us = 0;
    if (cuda && c->bytes(slots) > 0) {
      const auto key = static_cast<size_t>(c->bytes(slots));
      auto it = copy_us_by_bytes.find(key);
      if (it == copy_us_by_bytes.end()) {
        double us_copy = 0;  // 0 (printed as such) when the copy cannot be made or timed
        try {
          us_copy =
              same_size_copy_us(c->bytes(slots), dev, ctx, l2_flush, flush_by_write, opt.min_reps);
        } catch (const std::exception& e) {
          std::fprintf(stderr, "same-size copy of %.0f bytes not timed: %s\n", c->bytes(slots),
                       e.what());
          ctx.synchronize();
        }
        it = copy_us_by_bytes.emplace(key, us_copy).first;
      }
      copy_us = it->second;
    }
    const double pct_same = copy_us > 0 ? 100 * copy_us / med : 0;
    if (opt.csv)
      std::printf("\"%s\",%.3f,%.3f,%.1f,%.1f,%.3f,%.1f,%.3f,%.1f,%s,\"%s\"\n", c->name().c_str(),
                  med, mn, gbps, pct_bw, tflops, pct_mma, copy_us, pct_same, bound, timing.c_str());
    else
      std::printf("%-64s %10.2f %10.2f %9.1f %5.1f%% %9.3f %5.1f%% %8.2f %5.1f%%  %-7s %s\n",
                  c->name().c_str(), med, mn, gbps, pct_bw, tflops, pct_mma, copy_us, pct_same,
                  bound, timing.c_str());
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace hybrid::test
