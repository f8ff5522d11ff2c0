#include "ops/check.h"

#include <vector>

namespace hybrid::ops {

namespace {
std::string dtype_list(std::initializer_list<DType> dtypes) {
  std::string s;
  for (DType d : dtypes) s += (s.empty() ? "" : "|") + std::string(dtype_name(d));
  return s;
}
bool dtype_ok(DType t, std::initializer_list<DType> dtypes) {
  if (dtypes.size() == 0) return true;
  for (DType d : dtypes)
    if (d == t) return true;
  return false;
}
}  // namespace

std::string describe_dims(std::initializer_list<Dim> dims) {
  std::string s = "[";
  bool first = true;
  for (const Dim& d : dims) {
    s += first ? "" : ", ";
    first = false;
    s += d.name;
    if (d.value >= 0) s += "=" + std::to_string(d.value);
  }
  return s + "]";
}

void Check::tensor(const Tensor& t, const char* name, std::initializer_list<Dim> dims,
                   std::initializer_list<DType> dtypes) {
  const std::string expected =
      describe_dims(dims) + (dtypes.size() ? " " + dtype_list(dtypes) : std::string());
  if (!t.defined()) fail("[", op_, "] ", name, ": expected ", expected, ", got undefined");
  bool ok = t.rank() == static_cast<int>(dims.size()) && dtype_ok(t.dtype(), dtypes);
  int i = 0;
  for (const Dim& d : dims) {
    if (ok && d.value >= 0 && t.size(i) != d.value) ok = false;
    ++i;
  }
  if (!ok) fail("[", op_, "] ", name, ": expected ", expected, ", got ", t.describe());
  see_device(t, name);
}

void Check::rank(const Tensor& t, const char* name, std::initializer_list<const char*> dim_names,
                 std::initializer_list<DType> dtypes) {
  std::string expected = "[";
  bool first = true;
  for (const char* n : dim_names) {
    expected += (first ? "" : ", ") + std::string(n);
    first = false;
  }
  expected += "]";
  if (dtypes.size()) expected += " " + dtype_list(dtypes);
  if (!t.defined()) fail("[", op_, "] ", name, ": expected ", expected, ", got undefined");
  if (t.rank() != static_cast<int>(dim_names.size()) || !dtype_ok(t.dtype(), dtypes))
    fail("[", op_, "] ", name, ": expected ", expected, ", got ", t.describe());
  see_device(t, name);
}

void Check::inner_contiguous(const Tensor& t, const char* name) {
  if (!t.defined() || t.rank() == 0) return;
  if (t.size(-1) > 1 && t.stride(-1) != 1)
    fail("[", op_, "] ", name, ": the last dimension must be contiguous (stride 1), got ",
         t.describe());
  no_overlap(t, name);
}

void Check::contiguous(const Tensor& t, const char* name) {
  if (t.defined() && !t.is_contiguous())
    fail("[", op_, "] ", name, ": expected a contiguous tensor, got ", t.describe());
}

void Check::no_overlap(const Tensor& t, const char* name) {
  if (!t.defined()) return;
  for (int i = 0; i < t.rank(); ++i)
    if (t.size(i) > 1 && t.stride(i) <= 0)
      fail("[", op_, "] ", name, ": strides must be positive, got ", t.describe());
}

void Check::see_device(const Tensor& t, const char* name) {
  if (!device_) {
    device_ = t.device();
    device_owner_ = name;
  } else if (!(*device_ == t.device())) {
    fail("[", op_, "] ", name, " is on ", to_string(t.device()), " but ", device_owner_, " is on ",
         to_string(*device_));
  }
}

Device Check::device() const {
  if (!device_) fail("[", op_, "] no tensor arguments were checked");
  return *device_;
}

int64_t host_index(const Tensor& t, int64_t i) {
  return t.dtype() == DType::i64 ? t.data_as<const int64_t>()[i * t.stride(0)]
                                 : t.data_as<const int32_t>()[i * t.stride(0)];
}

void check_cu_seqlens_values(Check& c, const Tensor& cu, int64_t T) {
  if (!cu.defined() || !cu.device().is_cpu()) return;
  const int64_t N = cu.size(0) - 1;
  c.require(host_index(cu, 0) == 0, "cu_seqlens[0] must be 0, got ", host_index(cu, 0));
  for (int64_t n = 0; n < N; ++n)
    c.require(host_index(cu, n + 1) >= host_index(cu, n),
              "cu_seqlens must be non-decreasing: cu_seqlens[", n + 1, "]=", host_index(cu, n + 1),
              " < cu_seqlens[", n, "]=", host_index(cu, n));
  c.require(host_index(cu, N) == T, "cu_seqlens[N=", N, "]=", host_index(cu, N),
            " must equal T=", T);
}

void check_state_slots_values(Check& c, const Tensor& slots, int64_t pool_rows,
                              const char* pool_name) {
  if (!slots.defined() || !slots.device().is_cpu()) return;
  std::vector<int64_t> owner(static_cast<size_t>(pool_rows), -1);  // sequence using each row
  for (int64_t n = 0; n < slots.size(0); ++n) {
    const int64_t s = host_index(slots, n);
    if (s < 0) continue;
    c.require(s < pool_rows, "state_slots[", n, "]=", s, " is out of range: ", pool_name, " has ",
              pool_rows, " slots");
    c.require(owner[s] < 0, "state_slots[", n, "]=", s, " repeats state_slots[", owner[s],
              "] (a pool row may appear once per call)");
    owner[s] = n;
  }
}

}  // namespace hybrid::ops
