// Files the unit tests write: a temporary folder, and safetensors files built from tensors.
#pragma once

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "hybrid/core/dtype.h"

namespace hybrid::test_files {

// tests/data of the source tree (an absolute path compiled in by tests/CMakeLists.txt).
inline std::filesystem::path data_dir() {
  return HYBRID_TEST_DATA_DIR;
}

// A fresh folder under the system's temporary directory, removed with everything in it.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    static int counter = 0;
    path = std::filesystem::temp_directory_path() /
           ("hybrid_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::create_directories(path);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
};

// One tensor of a safetensors file: its bytes as stored (little-endian).
struct StTensor {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

template <class T>
std::vector<char> as_bytes(const std::vector<T>& v) {
  return std::vector<char>(reinterpret_cast<const char*>(v.data()),
                           reinterpret_cast<const char*>(v.data() + v.size()));
}

// A zero-filled tensor of that dtype and shape.
inline StTensor zeros(const std::string& name, DType dtype, const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return {name, dtype, shape, std::vector<char>(static_cast<size_t>(n) * dtype_size(dtype), 0)};
}

// The dtype as safetensors spells it.
inline const char* file_dtype(DType t) {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::i32:
      return "I32";
    case DType::i64:
      return "I64";
    case DType::u8:
      return "U8";
    case DType::u32:
      return "U32";
    case DType::f64:
      return "F64";
  }
  return "?";
}

// Writes `tensors` as one safetensors file: widest dtype first, so that every tensor is aligned
// to its element size; header padded with spaces to a multiple of 8, as the safetensors writer
// does.
inline void write_safetensors(const std::filesystem::path& file, std::vector<StTensor> tensors) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const StTensor& a, const StTensor& b) {
    return dtype_size(a.dtype) > dtype_size(b.dtype);
  });
  std::string header = "{";
  std::vector<char> data;
  for (const StTensor& t : tensors) {
    const size_t begin = data.size();
    data.insert(data.end(), t.bytes.begin(), t.bytes.end());
    std::string shape;
    for (size_t i = 0; i < t.shape.size(); ++i)
      shape += (i ? "," : "") + std::to_string(t.shape[i]);
    if (header.size() > 1) header += ",";
    header += "\"" + t.name + "\":{\"dtype\":\"" + file_dtype(t.dtype) + "\",\"shape\":[" + shape +
              "],\"data_offsets\":[" + std::to_string(begin) + "," + std::to_string(data.size()) +
              "]}";
  }
  header += "}";
  while ((8 + header.size()) % 8 != 0) header += ' ';
  std::ofstream out(file, std::ios::binary);
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out.write(data.data(), static_cast<std::streamsize>(data.size()));
}

// Sets an environment variable for the scope, restoring the old value after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (old_.empty()) {
      unsetenv(name_);
    } else {
      setenv(name_, old_.c_str(), 1);
    }
  }

 private:
  const char* name_;
  std::string old_;
};

}  // namespace hybrid::test_files
