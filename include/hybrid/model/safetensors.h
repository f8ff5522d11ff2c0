// safetensors checkpoints, memory-mapped, every header checked before any tensor is used.
//
// File layout: u64 little-endian N | N bytes of JSON header | data. The header maps each tensor
// name to {dtype, shape, data_offsets: [begin, end)} relative to the data start; "__metadata__"
// holds string pairs. Checked on open (an error names the file, the tensor and the problem):
//   - N <= 100 MB and 8 + N <= file size; the header is a JSON object with no duplicate names;
//   - dtype known; shape non-negative integers; end - begin == numel · element size;
//   - the tensors tile the data exactly: sorted by begin, they start at 0, leave no gap, do not
//     overlap, and end at the end of the file;
//   - each tensor's address is a multiple of its element size (so views can be read in place).
// A sharded checkpoint (model.safetensors.index.json) opens every shard its weight_map names and
// checks that each listed tensor is in the shard named for it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "hybrid/core/tensor.h"

namespace hybrid {

struct SafetensorInfo {
  std::string name;
  std::string dtype_name;  // as in the file: "BF16", "F32", "F64", "I8", ...
  std::optional<DType>
      dtype;  // nullopt for file dtypes hybrid has no DType for (F64, I8, BOOL, F8_*)
  std::vector<int64_t> shape;
  size_t offset = 0;  // from the start of the file
  size_t bytes = 0;
};

// One memory-mapped .safetensors file (read-only). Move-only.
class SafetensorsFile {
 public:
  static constexpr size_t kMaxHeaderBytes = 100u << 20;

  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(SafetensorsFile&&) noexcept;
  SafetensorsFile& operator=(SafetensorsFile&&) noexcept;
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  size_t file_bytes() const { return size_; }
  const std::vector<SafetensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const SafetensorInfo* find(const std::string& name) const;
  // A host view of the mapped bytes. The memory is read-only: never write through it.
  Tensor view(const SafetensorInfo& info) const;

 private:
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<SafetensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// Every tensor of a checkpoint folder: model.safetensors, or the shards of
// model.safetensors.index.json, or (when neither exists) every *.safetensors in the folder.
class Checkpoint {
 public:
  explicit Checkpoint(const std::string& dir);

  bool has(const std::string& name) const { return where_.count(name) != 0; }
  const SafetensorInfo& info(const std::string& name) const;  // error names a missing tensor
  Tensor view(const std::string& name) const;                 // read-only host view
  std::vector<std::string> names() const;
  size_t total_bytes() const;  // bytes of tensor data in all files
  const std::vector<SafetensorsFile>& files() const { return files_; }

 private:
  std::string dir_;
  std::vector<SafetensorsFile> files_;
  std::map<std::string, std::pair<size_t, size_t>> where_;  // name -> (file, tensor index)
};

}  // namespace hybrid
