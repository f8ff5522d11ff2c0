#include "hybrid/core/tensor.h"

#include <cstdlib>
#include <cstring>

#include "core/cuda_api.h"
#include "hybrid/core/context.h"
#include "hybrid/core/error.h"

namespace hybrid {

std::vector<int64_t> contiguous_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> strides(shape.size());
  int64_t s = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = s;
    s *= shape[i];
  }
  return strides;
}

Tensor::Tensor(void* data, DType dtype, Device device, std::initializer_list<int64_t> shape)
    : Tensor(data, dtype, device, std::vector<int64_t>(shape)) {}

Tensor::Tensor(void* data, DType dtype, Device device, const std::vector<int64_t>& shape)
    : Tensor(data, dtype, device, shape, contiguous_strides(shape)) {}

Tensor::Tensor(void* data, DType dtype, Device device, const std::vector<int64_t>& shape,
               const std::vector<int64_t>& strides)
    : data_(data), dtype_(dtype), device_(device) {
  if (shape.size() > static_cast<size_t>(kMaxRank))
    fail("[tensor] rank ", shape.size(), " is above the maximum ", kMaxRank);
  if (shape.size() != strides.size())
    fail("[tensor] shape has ", shape.size(), " dims but strides has ", strides.size());
  rank_ = static_cast<int>(shape.size());
  for (int i = 0; i < rank_; ++i) {
    if (shape[i] < 0) fail("[tensor] negative size ", shape[i], " in dim ", i);
    shape_[i] = shape[i];
    strides_[i] = strides[i];
  }
}

int64_t Tensor::numel() const {
  if (!defined()) return 0;
  int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= shape_[i];
  return n;
}

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int i = rank_ - 1; i >= 0; --i) {
    if (shape_[i] != 1 && strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

int64_t Tensor::span_elements() const {
  if (numel() == 0) return 0;
  int64_t last = 0;
  for (int i = 0; i < rank_; ++i) last += (shape_[i] - 1) * strides_[i];
  return last + 1;
}

Tensor Tensor::slice(int dim, int64_t start, int64_t length) const {
  const int d = norm_dim(dim);
  if (d < 0 || d >= rank_) fail("[tensor] slice dim ", dim, " out of range for rank ", rank_);
  if (start < 0 || length < 0 || start + length > shape_[d])
    fail("[tensor] slice [", start, ", ", start + length, ") out of range for size ", shape_[d]);
  Tensor t = *this;
  t.data_ =
      static_cast<char*>(data_) + start * strides_[d] * static_cast<int64_t>(dtype_size(dtype_));
  t.shape_[d] = length;
  return t;
}

Tensor Tensor::select(int dim, int64_t index) const {
  const int d = norm_dim(dim);
  Tensor t = slice(d, index, 1);
  for (int i = d; i < rank_ - 1; ++i) {
    t.shape_[i] = t.shape_[i + 1];
    t.strides_[i] = t.strides_[i + 1];
  }
  t.rank_ = rank_ - 1;
  return t;
}

Tensor Tensor::reshape(const std::vector<int64_t>& shape) const {
  if (!is_contiguous()) fail("[tensor] reshape of a non-contiguous view ", describe());
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n != numel())
    fail("[tensor] reshape of ", describe(), " to ", shape.size(), " dims with ", n, " elements");
  return Tensor(data_, dtype_, device_, shape);
}

std::string Tensor::describe() const {
  if (!defined()) return "undefined";
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(shape_[i]);
  s += "] ";
  s += dtype_name(dtype_);
  if (!is_contiguous()) {
    s += " strides [";
    for (int i = 0; i < rank_; ++i) s += (i ? ", " : "") + std::to_string(strides_[i]);
    s += "]";
  }
  return s;
}

// ---- Buffer ----------------------------------------------------------------------------------

Buffer::Buffer(Device device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (device.is_cpu()) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    if (!data_) fail("[buffer] out of host memory: ", bytes, " bytes requested");
  } else {
    data_ = cuda_api::malloc_device(bytes, device.index);
  }
}

Buffer::~Buffer() {
  release();
}

Buffer::Buffer(Buffer&& other) noexcept
    : data_(other.data_), bytes_(other.bytes_), device_(other.device_) {
  other.data_ = nullptr;
  other.bytes_ = 0;
}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = other.data_;
    bytes_ = other.bytes_;
    device_ = other.device_;
    other.data_ = nullptr;
    other.bytes_ = 0;
  }
  return *this;
}

void Buffer::release() {
  if (!data_) return;
  if (device_.is_cpu())
    std::free(data_);
  else
    cuda_api::free_device(data_, device_.index);
  data_ = nullptr;
  bytes_ = 0;
}

OwnedTensor::OwnedTensor(Device device, DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  buffer_ = Buffer(device, static_cast<size_t>(n) * dtype_size(dtype));
  view_ = Tensor(buffer_.data(), dtype, device, shape);
}

// ---- copies ----------------------------------------------------------------------------------

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes,
                Context& ctx) {
  if (bytes == 0) return;
  if (dst_device.is_cpu() && src_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
  using cuda_api::CopyKind;
  const CopyKind kind = dst_device.is_cpu()   ? CopyKind::device_to_host
                        : src_device.is_cpu() ? CopyKind::host_to_device
                                              : CopyKind::device_to_device;
  cuda_api::copy_async(dst, src, bytes, kind, ctx.stream());
}

void copy_tensor(const Tensor& dst, const Tensor& src, Context& ctx) {
  if (dst.dtype() != src.dtype() || dst.shape() != src.shape() || dst.strides() != src.strides())
    fail("[copy_tensor] dst ", dst.describe(), " and src ", src.describe(), " differ in layout");
  copy_bytes(dst.data(), dst.device(), src.data(), src.device(), src.span_bytes(), ctx);
}

}  // namespace hybrid
