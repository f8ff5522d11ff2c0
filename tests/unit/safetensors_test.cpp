// safetensors: a good file and sharded checkpoint load; every malformed header is an error that
// names the file, the tensor and the problem.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "expect_error.h"
#include "hybrid/model/safetensors.h"
#include "test_files.h"

using namespace hybrid;
namespace fs = std::filesystem;
using hybrid::test_files::TempDir;

namespace {

// Writes u64 header size | header | data. `header_size_override` >= 0 writes that size instead.
void write_file(const fs::path& p, const std::string& header, const std::vector<uint8_t>& data,
                int64_t header_size_override = -1) {
  std::ofstream out(p, std::ios::binary);
  uint64_t n =
      header_size_override >= 0 ? static_cast<uint64_t>(header_size_override) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((n >> (8 * i)) & 0xff));
  out << header;
  out.write(reinterpret_cast<const char*>(data.data()), static_cast<std::streamsize>(data.size()));
}

// Header padded with spaces to a multiple of 8 (as the safetensors writer does).
std::string padded(std::string h) {
  while ((8 + h.size()) % 8) h += ' ';
  return h;
}

std::vector<uint8_t> bytes(size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(i);
  return v;
}

const std::string kGood = padded(
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]},)"
    R"("b":{"dtype":"BF16","shape":[4],"data_offsets":[24,32]}})");

}  // namespace

TEST(Safetensors, ReadsAGoodFile) {
  TempDir d;
  write_file(d.path / "model.safetensors", kGood, bytes(32));
  SafetensorsFile f((d.path / "model.safetensors").string());
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  const SafetensorInfo* a = f.find("a");
  ASSERT_TRUE(a);
  Tensor t = f.view(*a);
  EXPECT_EQ(t.describe(), "[2, 3] f32");
  EXPECT_EQ(static_cast<const uint8_t*>(t.data())[1], 1);
  Tensor b = f.view(*f.find("b"));
  EXPECT_EQ(static_cast<const uint8_t*>(b.data())[0], 24);
  Checkpoint c(d.path.string());
  EXPECT_TRUE(c.has("b"));
  EXPECT_EQ(c.total_bytes(), 32u);
  EXPECT_HYBRID_ERROR(c.view("missing.weight"), "missing tensor 'missing.weight'");
}

TEST(Safetensors, MalformedFilesAreErrors) {
  struct Bad {
    std::string header;
    size_t data;
    int64_t header_size;
    const char* text;
  };
  const std::vector<Bad> bad = {
      {kGood, 31, -1, "bytes of data (truncated?)"},  // truncated data
      {kGood, 0, 1000000, "runs past the end"},       // header size beyond the file
      {kGood, 0, int64_t{200} << 20, "above the"},    // header size above the limit
      {padded(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]})"), 24, -1,
       "not valid JSON"},
      {padded(R"([1,2])"), 0, -1, "not a JSON object"},
      {padded(R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,40]}})"), 24, -1,
       "out of bounds"},
      {padded(R"({"a":{"dtype":"F32","shape":[2,4],"data_offsets":[0,24]}})"), 24, -1,
       "needs 32 bytes"},
      {padded(R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,2]}})"), 2, -1,
       "unknown dtype 'Q4'"},
      {padded(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})"), 8, -1,
       "negative size"},
      {padded(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
       16, -1, "'a' appears twice"},
      {padded(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"),
       12, -1, "overlaps"},
      {padded(
           R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[1],"data_offsets":[12,16]}})"),
       16, -1, "a gap of 4 bytes before tensor 'b'"},
      {padded(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"), 12, -1,
       "4 bytes after the last tensor"},
      {padded(
           R"({"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"F32","shape":[1],"data_offsets":[2,6]}})"),
       6, -1, "misaligned"},
      {padded(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})"), 8, -1,
       "end before they begin"},
      {padded(R"({"a":{"dtype":"F32","shape":[2]}})"), 8, -1,
       "expected {dtype, shape, data_offsets}"},
  };
  for (const Bad& b : bad) {
    TempDir d;
    const fs::path p = d.path / "model.safetensors";
    write_file(p, b.header, bytes(b.data), b.header_size);
    EXPECT_HYBRID_ERROR(SafetensorsFile(p.string()), b.text);
  }
  TempDir d;
  std::ofstream(d.path / "tiny.safetensors") << "abc";
  EXPECT_HYBRID_ERROR(SafetensorsFile((d.path / "tiny.safetensors").string()), "too short");
  EXPECT_HYBRID_ERROR(SafetensorsFile((d.path / "none.safetensors").string()), "cannot open");
}

TEST(Safetensors, UnreadableDtypeIsAnErrorOnlyWhenViewed) {
  TempDir d;
  write_file(d.path / "model.safetensors",
             padded(R"({"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})"), bytes(8));
  SafetensorsFile f((d.path / "model.safetensors").string());
  EXPECT_HYBRID_ERROR(f.view(*f.find("a")), "tensor 'a' has dtype F64");
}

TEST(Checkpoint, ShardedThroughTheIndex) {
  TempDir d;
  write_file(d.path / "model-00001-of-00002.safetensors",
             padded(R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})"), bytes(4));
  write_file(d.path / "model-00002-of-00002.safetensors",
             padded(R"({"y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})"), bytes(8));
  std::ofstream(d.path / "model.safetensors.index.json")
      << R"({"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})";
  Checkpoint c(d.path.string());
  EXPECT_EQ(c.names(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(c.view("y").describe(), "[2] f32");

  std::ofstream(d.path / "model.safetensors.index.json")
      << R"({"weight_map":{"x":"model-00002-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}})";
  EXPECT_HYBRID_ERROR(Checkpoint(d.path.string()),
                      "places 'x' in model-00002-of-00002.safetensors");
  std::ofstream(d.path / "model.safetensors.index.json")
      << R"({"weight_map":{"x":"gone.safetensors"}})";
  EXPECT_HYBRID_ERROR(Checkpoint(d.path.string()),
                      "gone.safetensors named by the index does not exist");
}

TEST(Checkpoint, FolderErrors) {
  EXPECT_HYBRID_ERROR(Checkpoint("/nonexistent/model"), "/nonexistent/model does not exist");
  TempDir d;
  EXPECT_HYBRID_ERROR(Checkpoint(d.path.string()), "holds no model.safetensors");
}
