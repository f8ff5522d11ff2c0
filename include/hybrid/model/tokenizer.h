// Hugging Face tokenizer.json: byte-level BPE (Qwen2/Qwen3, GPT-NeoX/Mamba2, Nemotron-H, GPT-2).
//
// Encode pipeline (as Hugging Face `tokenizers` runs it; docs/TOKENIZER.md has the details):
//   1. added tokens with normalized=false are split out of the raw text (leftmost, longest first;
//      lstrip/rstrip/single_word honoured); they are never normalised nor BPE'd;
//   2. each remaining piece is normalised (NFC when "normalizer" says so), then added tokens with
//      normalized=true are split out of it the same way;
//   3. the pre-tokenizer cuts each piece into words: a Split regex (Qwen2, Llama-3, Mistral-tekken
//      patterns, matched by hand over code points) and/or ByteLevel (GPT-2 regex when use_regex,
//      add_prefix_space), then maps the word's bytes to GPT-2's bytes_to_unicode characters;
//   4. BPE merges each word by merge rank; a byte whose character is missing from the vocab becomes
//      the unk token (fused when fuse_unk) or, without one, is dropped (as `tokenizers` does).
// encode() adds no BOS/EOS: the post_processor is not applied (Qwen/NeoX files add nothing).
// Decode: ids -> token strings -> ByteLevel decoder -> bytes; invalid UTF-8 becomes U+FFFD, one per
// maximal invalid subpart (Rust's String::from_utf8_lossy). Ids without a token are skipped.
// Errors are hybrid::Error with messages starting "[tokenizer]" and naming the file.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace hybrid {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;      // skipped by decode(skip_special=true)
  bool lstrip = false;       // also swallows the white space on its left
  bool rstrip = false;       // also swallows the white space on its right
  bool normalized = false;   // matched in the normalised text (else in the raw text)
  bool single_word = false;  // matched only when not inside a word (alphanumeric neighbours)
};

class Tokenizer {
 public:
  // A tokenizer.json file, or a folder that holds one.
  static Tokenizer from_file(const std::string& path);
  // The JSON text of a tokenizer.json; `origin` names it in error messages.
  static Tokenizer from_json(const std::string& text, const std::string& origin = "<json>");

  std::vector<int32_t> encode(std::string_view utf8) const;
  // Text of the ids (lossy UTF-8). skip_special drops the added tokens marked special.
  std::string decode(std::span<const int32_t> ids, bool skip_special = false) const;
  // The raw bytes of the ids, before UTF-8 repair (may end inside a character).
  std::string decode_bytes(std::span<const int32_t> ids, bool skip_special = false) const;

  // The words the pre-tokenizer cuts from `text` (taken as already normalised; added tokens are not
  // looked for), each as its byte-level string ("Ġworld"): Hugging Face's pre_tokenize_str.
  std::vector<std::string> pre_tokenize(std::string_view text) const;

  int32_t vocab_size() const;  // largest id + 1 (model vocab and added tokens)
  std::optional<int32_t> token_to_id(std::string_view token) const;
  // The token's string as stored in the file (byte-level characters); empty for an unused id.
  const std::string& id_to_token(int32_t id) const;
  bool is_special(int32_t id) const;
  const std::vector<AddedToken>& added_tokens() const;
  const std::string& origin() const;

  struct Impl;

 private:
  explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const Impl> impl_;
  friend class IncrementalDecoder;
};

// Streaming detokenizer: push ids one at a time, get back only complete UTF-8 characters; bytes of
// a character still being spelled out are held until it completes. Invalid bytes become U+FFFD as
// soon as they are known to be invalid; flush() ends the stream (a held partial character becomes
// U+FFFD). The concatenation of every push() and the final flush() equals decode(all ids).
class IncrementalDecoder {
 public:
  explicit IncrementalDecoder(const Tokenizer& tokenizer, bool skip_special = false);
  std::string push(int32_t id);
  std::string flush();

 private:
  Tokenizer tokenizer_;
  bool skip_special_;
  std::string pending_;  // bytes of an incomplete trailing character (at most 3)
};

// Canonical composition (Unicode NFC) of UTF-8 text; invalid UTF-8 is replaced by U+FFFD first.
std::string nfc(std::string_view utf8);
// Unicode version of the tables (from Python's unicodedata when they were generated).
const char* unicode_version();

// ChatML, the Qwen chat format, without tools or thinking flags (Qwen2.5's default system prompt
// is not injected: pass it as `system` if wanted):
//   [<|im_start|>system\n{system}<|im_end|>\n] <|im_start|>user\n{user}<|im_end|>\n
//   <|im_start|>assistant\n
struct ChatMessage {
  std::string role;  // "system" | "user" | "assistant" | "tool"
  std::string content;
};
std::string chatml_format(std::span<const ChatMessage> messages, bool add_generation_prompt = true);
std::string chatml_prompt(std::string_view user, std::string_view system = {});

}  // namespace hybrid
