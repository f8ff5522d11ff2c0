// Argument validation at the op boundary. Every message names the op, the argument, what was
// expected and what came:
//   [gdn_chunk_prefill] k: expected [T=257, Hk=2, K=128] bf16, got [257, 2, 64] bf16
// Usage:
//   Check c("rms_norm");
//   c.rank(a.x, "x", {"T", "D"}, {DType::f32, DType::bf16});   // rank + dtype, learns nothing
//   const int64_t T = a.x.size(0), D = a.x.size(1);
//   c.tensor(a.out, "out", {{"T", T}, {"D", D}}, {a.x.dtype()});
//   c.inner_contiguous(a.x, "x");
//   Device dev = c.device();   // all tensors seen so far on one device
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "hybrid/core/error.h"
#include "hybrid/core/tensor.h"

namespace hybrid::ops {

struct Dim {
  const char* name;
  int64_t value;  // -1: any size
};

class Check {
 public:
  explicit Check(const char* op) : op_(op) {}

  // A required tensor: defined, of `dims.size()` dims with those sizes, one of `dtypes`
  // (empty = any dtype).
  void tensor(const Tensor& t, const char* name, std::initializer_list<Dim> dims,
              std::initializer_list<DType> dtypes);
  // Only the rank and dtype; the names document the layout in the message.
  void rank(const Tensor& t, const char* name, std::initializer_list<const char*> dim_names,
            std::initializer_list<DType> dtypes);
  // An optional tensor: checked as tensor() when defined.
  void optional(const Tensor& t, const char* name, std::initializer_list<Dim> dims,
                std::initializer_list<DType> dtypes) {
    if (t.defined()) tensor(t, name, dims, dtypes);
  }
  // The last dimension has stride 1 (rows may be strided: views into packed projections).
  void inner_contiguous(const Tensor& t, const char* name);
  void contiguous(const Tensor& t, const char* name);
  // Positive strides only, so that distinct elements never alias (outputs).
  void no_overlap(const Tensor& t, const char* name);

  // Any other condition, with the message parts after "[op] ".
  template <class... Parts>
  void require(bool cond, const Parts&... parts) {
    if (!cond) fail("[", op_, "] ", parts...);
  }

  // The one device every tensor seen so far lives on (throws when they differ or none was seen).
  Device device() const;
  const char* op() const { return op_; }

 private:
  void see_device(const Tensor& t, const char* name);
  const char* op_;
  std::optional<Device> device_;
  std::string device_owner_;
};

std::string describe_dims(std::initializer_list<Dim> dims);  // "[T=257, Hk=2, K=128]"

// Element i of a 1-D i32 or i64 tensor in host memory.
int64_t host_index(const Tensor& t, int64_t i);

// The values of the varlen arguments every op with packed sequences takes. Device values cannot
// be read at the boundary without a synchronisation, so these check only tensors in host memory
// (shapes and dtypes are the caller's checks):
//   cu_seqlens [N+1]: cu[0] = 0, non-decreasing, cu[N] = T;
//   state_slots [N]: every slot < the pool's rows; non-negative slots distinct (a pool row may
//   appear once per call; negative = padding sequence).
void check_cu_seqlens_values(Check& c, const Tensor& cu_seqlens, int64_t T);
void check_state_slots_values(Check& c, const Tensor& state_slots, int64_t pool_rows,
                              const char* pool_name);

}  // namespace hybrid::ops
