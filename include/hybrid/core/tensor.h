// Tensor: a non-owning, strided view of memory. Buffer / OwnedTensor: memory that owns itself.
//
// Shapes and strides count elements (not bytes). Element (i0, i1, ...) lives at
//   data + (i0*strides[0] + i1*strides[1] + ...) * dtype_size(dtype).
// A default-constructed Tensor is "undefined": the way optional arguments are left out.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "hybrid/core/device.h"
#include "hybrid/core/dtype.h"

namespace hybrid {

inline constexpr int kMaxRank = 6;

class Tensor {
 public:
  Tensor() = default;  // undefined (an omitted optional argument)
  // Contiguous row-major view.
  Tensor(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape);
  Tensor(void* data, DType dtype, Device device, const std::vector<int64_t>& shape);
  // Strided view.
  Tensor(void* data, DType dtype, Device device, const std::vector<int64_t>& shape,
         const std::vector<int64_t>& strides);

  bool defined() const { return rank_ >= 0; }
  void* data() const { return data_; }
  template <class T>
  T* data_as() const {
    return static_cast<T*>(data_);
  }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int rank() const { return rank_; }
  // size(-1) is the last dimension.
  int64_t size(int dim) const { return shape_[norm_dim(dim)]; }
  int64_t stride(int dim) const { return strides_[norm_dim(dim)]; }
  std::vector<int64_t> shape() const { return {shape_.begin(), shape_.begin() + rank_}; }
  std::vector<int64_t> strides() const { return {strides_.begin(), strides_.begin() + rank_}; }
  int64_t numel() const;
  // Row-major contiguous (strides of size-1 dimensions are not looked at).
  bool is_contiguous() const;
  // 1 + the largest element offset the view can touch (0 when empty): the span it needs.
  int64_t span_elements() const;
  size_t span_bytes() const { return static_cast<size_t>(span_elements()) * dtype_size(dtype_); }

  // Views of the same memory.
  Tensor slice(int dim, int64_t start, int64_t length) const;  // [start, start + length) of dim
  Tensor select(int dim, int64_t index) const;                 // drops dim
  Tensor reshape(const std::vector<int64_t>& shape) const;     // contiguous views only

  // "[257, 2, 64] bf16" (and "undefined").
  std::string describe() const;

 private:
  int norm_dim(int dim) const { return dim < 0 ? dim + rank_ : dim; }

  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  Device device_ = Device::cpu();
  int rank_ = -1;
  std::array<int64_t, kMaxRank> shape_{};
  std::array<int64_t, kMaxRank> strides_{};
};

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape);

// Owning, uninitialised memory on one device (host memory is 64-byte aligned). Move-only.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_ = Device::cpu();
};

// A Buffer together with a contiguous view of all of it.
class OwnedTensor {
 public:
  OwnedTensor() = default;
  OwnedTensor(Device device, DType dtype, const std::vector<int64_t>& shape);
  const Tensor& view() const { return view_; }
  operator const Tensor&() const { return view_; }
  void* data() const { return view_.data(); }
  template <class T>
  T* data_as() const {
    return view_.data_as<T>();
  }

 private:
  Buffer buffer_;
  Tensor view_;
};

class Context;
// Copies `bytes` between host and/or device memory, ordered on ctx's stream (the host side of a
// device copy must stay alive until the stream reaches it; ctx.synchronize() waits for that).
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                Context& ctx);
// Copies a whole tensor's span (same dtype, shape and strides on both sides).
void copy_tensor(const Tensor& dst, const Tensor& src, Context& ctx);

}  // namespace hybrid
