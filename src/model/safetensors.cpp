#include "hybrid/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "hybrid/core/error.h"

namespace hybrid {

namespace {

using json = nlohmann::json;

struct FileDtype {
  const char* name;
  size_t bytes;
  std::optional<DType> dtype;
};

constexpr FileDtype kFileDtypes[] = {
    {"F32", 4, DType::f32},    {"F16", 2, DType::f16},       {"BF16", 2, DType::bf16},
    {"I32", 4, DType::i32},    {"I64", 8, DType::i64},       {"U8", 1, DType::u8},
    {"U32", 4, DType::u32},    {"F64", 8, std::nullopt},     {"I8", 1, std::nullopt},
    {"I16", 2, std::nullopt},  {"U16", 2, std::nullopt},     {"U64", 8, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const FileDtype* file_dtype(const std::string& name) {
  for (const FileDtype& d : kFileDtypes)
    if (name == d.name) return &d;
  return nullptr;
}

// Parses the header JSON, rejecting duplicate keys at the top level (nlohmann would keep the last).
json parse_header(const std::string& text, const std::string& path) {
  std::set<std::string> seen;
  std::string duplicate;
  json::parser_callback_t cb = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1) {
      const std::string key = parsed.get<std::string>();
      if (!seen.insert(key).second && duplicate.empty()) duplicate = key;
    }
    return true;
  };
  json header;
  try {
    header = json::parse(text, cb);
  } catch (const json::exception& e) {
    fail("[safetensors] ", path, ": the header is not valid JSON: ", e.what());
  }
  if (!duplicate.empty())
    fail("[safetensors] ", path, ": tensor '", duplicate, "' appears twice in the header");
  if (!header.is_object()) fail("[safetensors] ", path, ": the header is not a JSON object");
  return header;
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("[safetensors] cannot open ", path, ": ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    ::close(fd);
    fail("[safetensors] cannot stat ", path, ": ", std::strerror(errno));
  }
  size_ = static_cast<size_t>(st.st_size);
  if (size_ < 8) {
    ::close(fd);
    fail("[safetensors] ", path, ": file is ", size_,
         " bytes, too short for the 8-byte header size (truncated?)");
  }
  map_ = mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    fail("[safetensors] cannot map ", path, ": ", std::strerror(errno));
  }
  const auto* bytes = static_cast<const uint8_t*>(map_);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | bytes[i];
  if (n > kMaxHeaderBytes)
    fail("[safetensors] ", path, ": header size ", n, " is above the ", kMaxHeaderBytes,
         "-byte limit");
  if (8 + n > size_)
    fail("[safetensors] ", path, ": header of ", n, " bytes runs past the end of the ", size_,
         "-byte file (truncated?)");
  const size_t data_start = 8 + n;
  const size_t data_bytes = size_ - data_start;
  json header = parse_header(std::string(reinterpret_cast<const char*>(bytes + 8), n), path);

  for (auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail("[safetensors] ", path, ": __metadata__ is not an object");
      for (auto& [k, v] : entry.items())
        metadata_[k] = v.is_string() ? v.get<std::string>() : v.dump();
      continue;
    }
    auto bad = [&](const std::string& what) {
      fail("[safetensors] ", path, ": tensor '", name, "': ", what);
    };
    if (!entry.is_object() || !entry.contains("dtype") || !entry.contains("shape") ||
        !entry.contains("data_offsets"))
      bad("expected {dtype, shape, data_offsets}");
    if (!entry["dtype"].is_string()) bad("dtype is not a string");
    SafetensorInfo info;
    info.name = name;
    info.dtype_name = entry["dtype"].get<std::string>();
    const FileDtype* fd = file_dtype(info.dtype_name);
    if (!fd) bad("unknown dtype '" + info.dtype_name + "'");
    info.dtype = fd->dtype;
    if (!entry["shape"].is_array()) bad("shape is not an array");
    uint64_t numel = 1;
    for (auto& d : entry["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        bad("shape " + entry["shape"].dump() + " has a non-integer or negative size");
      info.shape.push_back(d.get<int64_t>());
      numel *= static_cast<uint64_t>(d.get<int64_t>());
    }
    auto& off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      bad("data_offsets is not [begin, end]");
    const uint64_t begin = off[0].get<uint64_t>(), end = off[1].get<uint64_t>();
    if (begin > end) bad(str("data_offsets [", begin, ", ", end, ") end before they begin"));
    if (end > data_bytes)
      bad(str("data_offsets [", begin, ", ", end, ") out of bounds: the file holds ", data_bytes,
              " bytes of data (truncated?)"));
    if (end - begin != numel * fd->bytes)
      bad(str(info.dtype_name, " ", entry["shape"].dump(), " needs ", numel * fd->bytes,
              " bytes but data_offsets [", begin, ", ", end, ") hold ", end - begin));
    info.offset = data_start + begin;
    info.bytes = end - begin;
    if (info.offset % fd->bytes != 0)
      bad(str("misaligned: file offset ", info.offset, " is not a multiple of the ", fd->bytes,
              "-byte element size"));
    index_[name] = tensors_.size();
    tensors_.push_back(std::move(info));
  }

  // The tensors must tile the data region exactly: no gap, no overlap.
  std::vector<const SafetensorInfo*> order;
  for (const auto& t : tensors_) order.push_back(&t);
  std::sort(order.begin(), order.end(), [](auto* a, auto* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->bytes < b->bytes;
  });
  size_t expect = data_start;
  for (const SafetensorInfo* t : order) {
    if (t->offset < expect)
      fail("[safetensors] ", path, ": tensor '", t->name,
           "' overlaps the tensor before it (at data offset ", t->offset - data_start, ")");
    if (t->offset > expect)
      fail("[safetensors] ", path, ": a gap of ", t->offset - expect, " bytes before tensor '",
           t->name, "'");
    expect = t->offset + t->bytes;
  }
  if (expect != size_)
    fail("[safetensors] ", path, ": ", size_ - expect,
         " bytes after the last tensor are not described by the header");
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) munmap(map_, size_);
}

SafetensorsFile::SafetensorsFile(SafetensorsFile&& o) noexcept
    : path_(std::move(o.path_)),
      map_(o.map_),
      size_(o.size_),
      tensors_(std::move(o.tensors_)),
      index_(std::move(o.index_)),
      metadata_(std::move(o.metadata_)) {
  o.map_ = nullptr;
}

SafetensorsFile& SafetensorsFile::operator=(SafetensorsFile&& o) noexcept {
  if (this != &o) {
    if (map_) munmap(map_, size_);
    path_ = std::move(o.path_);
    map_ = o.map_;
    size_ = o.size_;
    tensors_ = std::move(o.tensors_);
    index_ = std::move(o.index_);
    metadata_ = std::move(o.metadata_);
    o.map_ = nullptr;
  }
  return *this;
}

const SafetensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

Tensor SafetensorsFile::view(const SafetensorInfo& info) const {
  if (!info.dtype)
    fail("[safetensors] ", path_, ": tensor '", info.name, "' has dtype ", info.dtype_name,
         ", which hybrid does not read (f32, f16, bf16, i32, i64, u8, u32)");
  void* p = static_cast<char*>(map_) + info.offset;
  return Tensor(p, *info.dtype, Device::cpu(), info.shape);
}

// ---- Checkpoint --------------------------------------------------------------------------------

Checkpoint::Checkpoint(const std::string& dir) : dir_(dir) {
  namespace fs = std::filesystem;
  if (!fs::exists(dir)) fail("[checkpoint] ", dir, " does not exist");
  if (!fs::is_directory(dir)) fail("[checkpoint] ", dir, " is not a folder");
  const fs::path index_path = fs::path(dir) / "model.safetensors.index.json";
  const fs::path single = fs::path(dir) / "model.safetensors";
  std::map<std::string, std::string> weight_map;  // tensor -> shard file name
  std::vector<std::string> shard_names;
  if (fs::exists(index_path)) {
    std::ifstream in(index_path);
    json index;
    try {
      index = json::parse(in);
    } catch (const json::exception& e) {
      fail("[checkpoint] ", index_path.string(), " is not valid JSON: ", e.what());
    }
    if (!index.contains("weight_map") || !index["weight_map"].is_object())
      fail("[checkpoint] ", index_path.string(), " has no weight_map object");
    std::set<std::string> shards;
    for (auto& [name, file] : index["weight_map"].items()) {
      if (!file.is_string())
        fail("[checkpoint] ", index_path.string(), ": weight_map['", name, "'] is not a file name");
      weight_map[name] = file.get<std::string>();
      shards.insert(file.get<std::string>());
    }
    shard_names.assign(shards.begin(), shards.end());
  } else if (fs::exists(single)) {
    shard_names.push_back("model.safetensors");
  } else {
    for (auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".safetensors")
        shard_names.push_back(e.path().filename().string());
    std::sort(shard_names.begin(), shard_names.end());
    if (shard_names.empty())
      fail("[checkpoint] ", dir,
           " holds no model.safetensors, model.safetensors.index.json or *.safetensors file");
  }
  for (const std::string& shard : shard_names) {
    const fs::path p = fs::path(dir) / shard;
    if (!fs::exists(p))
      fail("[checkpoint] shard ", p.string(), " named by the index does not exist");
    files_.emplace_back(p.string());
    const size_t fi = files_.size() - 1;
    const auto& ts = files_.back().tensors();
    for (size_t ti = 0; ti < ts.size(); ++ti) {
      auto [it, inserted] = where_.emplace(ts[ti].name, std::make_pair(fi, ti));
      if (!inserted)
        fail("[checkpoint] tensor '", ts[ti].name, "' is in both ", files_[it->second.first].path(),
             " and ", p.string());
    }
  }
  for (auto& [name, shard] : weight_map) {
    auto it = where_.find(name);
    if (it == where_.end() ||
        std::filesystem::path(files_[it->second.first].path()).filename() != shard)
      fail("[checkpoint] the index places '", name, "' in ", shard, ", which does not hold it");
  }
}

const SafetensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("[checkpoint] ", dir_, ": missing tensor '", name, "'");
  return files_[it->second.first].tensors()[it->second.second];
}

Tensor Checkpoint::view(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) fail("[checkpoint] ", dir_, ": missing tensor '", name, "'");
  const SafetensorsFile& f = files_[it->second.first];
  return f.view(f.tensors()[it->second.second]);
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (auto& [n, _] : where_) out.push_back(n);
  return out;
}

size_t Checkpoint::total_bytes() const {
  size_t b = 0;
  for (auto& f : files_)
    for (auto& t : f.tensors()) b += t.bytes;
  return b;
}

}  // namespace hybrid
