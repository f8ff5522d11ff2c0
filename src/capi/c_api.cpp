// hybrid_run: the op name picks a binding that reads the args struct's fields from JSON.
#include "hybrid/c_api.h"

#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "hybrid/core/context.h"
#include "hybrid/core/error.h"
#include "hybrid/ops/attention.h"
#include "hybrid/ops/conv.h"
#include "hybrid/ops/gdn.h"
#include "hybrid/ops/gdn_chunk.h"
#include "hybrid/ops/norm.h"
#include "hybrid/ops/sampling.h"
#include "hybrid/ops/ssm.h"

using nlohmann::json;
using namespace hybrid;

struct hybrid_context {
  Context ctx;
  explicit hybrid_context(Device d) : ctx(d) {}
};

namespace {

thread_local std::string last_error;

DType parse_dtype(const std::string& s) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::i32, DType::i64, DType::u8,
                  DType::u32, DType::f64})
    if (s == dtype_name(t)) return t;
  fail("[c_api] unknown dtype '", s, "'");
}

// Field readers: a missing or null field leaves the default (an undefined tensor, nullopt...).
void read(const json& j, const char* name, Tensor& t, Device dev) {
  if (!j.contains(name) || j[name].is_null()) return;
  const json& d = j[name];
  t = Tensor(reinterpret_cast<void*>(d.at("ptr").get<uintptr_t>()), parse_dtype(d.at("dtype")), dev,
             d.at("shape").get<std::vector<int64_t>>(),
             d.at("strides").get<std::vector<int64_t>>());
}
template <class T>
void read(const json& j, const char* name, T& v, Device) {
  if (j.contains(name) && !j[name].is_null()) v = j[name].get<T>();
}
void read(const json& j, const char* name, std::optional<float>& v, Device) {
  if (j.contains(name) && !j[name].is_null()) v = j[name].get<float>();
}

using Binding = std::function<void(const json&, Context&)>;

// F(field): read args.field from the JSON field of the same name.
#define F(field) read(j, #field, a.field, ctx.device())

const std::map<std::string, Binding>& bindings() {
  static const std::map<std::string, Binding> table = {
      {"rms_norm",
       [](const json& j, Context& ctx) {
         RmsNorm a;
         F(x), F(weight), F(out), F(residual), F(residual_out), F(eps), F(zero_centered);
         rms_norm(a, ctx);
       }},
      {"gdn_recurrent",
       [](const json& j, Context& ctx) {
         GdnRecurrent a;
         F(q), F(k), F(v), F(g), F(beta), F(state), F(cu_seqlens), F(state_slots);
         F(has_initial_state), F(out), F(states_per_token), F(scale), F(use_qk_l2norm);
         gdn_recurrent(a, ctx);
       }},
      {"gdn_prep_step",
       [](const json& j, Context& ctx) {
         GdnPrepStep a;
         F(conv_out), F(a), F(b), F(A_log), F(dt_bias), F(q_norm_weight), F(k_norm_weight);
         F(state), F(state_slots), F(y), F(eps);
         gdn_prep_step(a, ctx);
       }},
      {"gdn_chunk_prefill",
       [](const json& j, Context& ctx) {
         GdnChunkPrefill a;
         F(q), F(k), F(v), F(g), F(beta), F(cu_seqlens), F(state_slots), F(has_initial_state);
         F(state), F(out), F(checkpoints), F(checkpoint_every), F(scale), F(use_qk_l2norm);
         gdn_chunk_prefill(a, ctx);
       }},
      {"ssm_step",
       [](const json& j, Context& ctx) {
         SsmStep a;
         F(x), F(dt), F(A_log), F(B), F(C), F(D), F(dt_bias), F(z), F(state), F(state_slots);
         F(y), F(dt_softplus), F(dt_min), F(dt_max);
         ssm_step(a, ctx);
       }},
      {"ssm_chunk_scan",
       [](const json& j, Context& ctx) {
         SsmChunkScan a;
         F(x), F(dt), F(A_log), F(B), F(C), F(D), F(dt_bias), F(z), F(cu_seqlens), F(state_slots);
         F(has_initial_state), F(state), F(y), F(chunk_states), F(chunk_size), F(dt_softplus);
         F(dt_min), F(dt_max);
         ssm_chunk_scan(a, ctx);
       }},
      {"attn_decode",
       [](const json& j, Context& ctx) {
         AttnDecode a;
         F(q), F(k_cache), F(v_cache), F(page_table), F(seq_lens), F(out), F(window), F(scale);
         attn_decode(a, ctx);
       }},
      {"argmax",
       [](const json& j, Context& ctx) {
         Argmax a;
         F(x), F(out);
         argmax(a, ctx);
       }},
      {"top_k",
       [](const json& j, Context& ctx) {
         TopK a;
         F(x), F(ids), F(values);
         top_k(a, ctx);
       }},
      {"sample_rows",
       [](const json& j, Context& ctx) {
         SampleRows a;
         F(x), F(draws), F(out), F(temperature), F(min_p);
         sample_rows(a, ctx);
       }},
      {"softmax_mass",
       [](const json& j, Context& ctx) {
         SoftmaxMass a;
         F(x), F(out), F(temperature);
         softmax_mass(a, ctx);
       }},
      {"attn_prefill",
       [](const json& j, Context& ctx) {
         AttnPrefill a;
         F(q), F(k_cache), F(v_cache), F(page_table), F(cu_seqlens), F(seq_lens), F(out);
         F(window), F(scale);
         attn_prefill(a, ctx);
       }},
  };
  return table;
}

#undef F

template <class Body>
int guarded(Body&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}

}  // namespace

extern "C" {

hybrid_context* hybrid_context_create(const char* device) {
  hybrid_context* c = nullptr;
  guarded([&] { c = new hybrid_context(parse_device(device)); });
  return c;
}

void hybrid_context_destroy(hybrid_context* ctx) {
  delete ctx;
}

int hybrid_context_set_stream(hybrid_context* ctx, void* stream) {
  return guarded([&] { ctx->ctx.set_stream(stream); });
}

int hybrid_run(hybrid_context* ctx, const char* op, const char* args_json) {
  return guarded([&] {
    auto it = bindings().find(op);
    if (it == bindings().end()) fail("[c_api] unknown op '", op, "' (known: ", hybrid_ops(), ")");
    json j;
    try {
      j = json::parse(args_json);
    } catch (const json::exception& e) {
      fail("[c_api] ", op, ": arguments are not valid JSON: ", e.what());
    }
    it->second(j, ctx->ctx);
  });
}

const char* hybrid_ops(void) {
  static const std::string names = [] {
    std::string s;
    for (auto& [name, _] : bindings()) s += (s.empty() ? "" : ",") + name;
    return s;
  }();
  return names.c_str();
}

const char* hybrid_last_error(void) {
  return last_error.c_str();
}

}  // extern "C"
