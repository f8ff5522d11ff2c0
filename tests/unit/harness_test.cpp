// The op harness must catch what it claims to catch: wrong values, unwritten outputs, writes past
// a tensor or outside a strided view, modified inputs, NaN disagreement; Unsupported is a skip.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/harness.h"

using namespace hybrid;
using namespace hybrid::test;

namespace {

enum class Fault {
  none,
  wrong_value,
  skip_element,
  write_past_end,
  write_outside_view,
  modify_input,
  nan,
  unsupported
};

// out = 2·x over [n] f32, with an injected fault.
struct DoubleCase : Case {
  Fault fault;
  bool strided_out;
  explicit DoubleCase(Fault f, bool strided = false) : fault(f), strided_out(strided) {}
  std::string op() const override { return "double"; }
  std::string params() const override { return str("fault=", static_cast<int>(fault)); }
  void init(Rng& rng, Slots& s) override {
    fill_uniform(s.input("x", DType::f32, {8}), rng, -1, 1);
    if (strided_out)
      s.strided("out", Role::out, DType::f32, {8}, {2}, 1, 17);
    else
      s.output("out", DType::f32, {8});
  }
  void run(const Views& v, Context&) override {
    if (fault == Fault::unsupported) throw Unsupported("[double] not here");
    const float* x = v.at("x").data_as<const float>();
    float* out = v.at("out").data_as<float>();
    const int64_t st = v.at("out").stride(0);
    for (int i = 0; i < 8; ++i) {
      if (fault == Fault::skip_element && i == 5) continue;
      out[i * st] = 2 * x[i];
    }
    if (fault == Fault::wrong_value) out[3 * st] += 0.01f;
    if (fault == Fault::nan) out[2 * st] = std::numeric_limits<float>::quiet_NaN();
    if (fault == Fault::write_past_end) out[8 * st] = 1.0f;
    if (fault == Fault::write_outside_view) out[st - 1] = 1.0f;  // between two strided elements
    if (fault == Fault::modify_input) const_cast<float*>(x)[0] = 0.0f;
  }
  void oracle(const Slots& s, Expected& e) override {
    for (int i = 0; i < 8; ++i) e["out"].push_back(2 * s["x"].get(i));
  }
};

Outcome run(Fault f, bool strided = false) {
  DoubleCase c(f, strided);
  return run_case(c, RunOptions{});
}

}  // namespace

TEST(Harness, PassesACorrectKernel) {
  EXPECT_EQ(run(Fault::none).kind, Outcome::pass);
  EXPECT_EQ(run(Fault::none, true).kind, Outcome::pass);
}

TEST(Harness, CatchesEveryFault) {
  struct Expect {
    Fault f;
    bool strided;
    const char* text;
  };
  for (const Expect& e :
       {Expect{Fault::wrong_value, false, "nmse"}, Expect{Fault::skip_element, false, "out"},
        Expect{Fault::write_past_end, false, "guard bytes"},
        Expect{Fault::write_outside_view, true, "outside the view"},
        Expect{Fault::modify_input, false, "an input was modified"},
        Expect{Fault::nan, false, "differ"}}) {
    Outcome o = run(e.f, e.strided);
    EXPECT_EQ(o.kind, Outcome::fail) << static_cast<int>(e.f);
    EXPECT_NE(o.detail.find(e.text), std::string::npos) << o.detail;
  }
}

TEST(Harness, UnsupportedIsASkip) {
  Outcome o = run(Fault::unsupported);
  EXPECT_EQ(o.kind, Outcome::skip);
  EXPECT_NE(o.detail.find("not here"), std::string::npos);
}

TEST(Harness, SeedsAreFixedAndPerCase) {
  EXPECT_EQ(case_seed(42, "a(x=1)"), case_seed(42, "a(x=1)"));
  EXPECT_NE(case_seed(42, "a(x=1)"), case_seed(42, "a(x=2)"));
  Rng a(7), b(7);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(a.next_u64(), b.next_u64());
}
