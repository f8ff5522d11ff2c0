// hybrid::Error: every failure the library reports. Messages start with the op (or subsystem) in
// brackets and name the argument, what was expected and what came:
//   [gdn_chunk_prefill] k: expected [T=257, Hk=2, K=128] bf16, got [257, 2, 64] bf16
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace hybrid {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// Concatenates anything streamable: str("T=", 7, " D=", 4096) == "T=7 D=4096".
// No kernel of the backend asked for can run a call that is otherwise valid (a head dim a
// kernel was not built for, an op a backend lacks). Test harnesses count it as a skip.
class Unsupported : public Error {
 public:
  explicit Unsupported(const std::string& what) : Error(what) {}
};

template <class... Parts>
std::string str(const Parts&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  return os.str();
}

template <class... Parts>
[[noreturn]] void fail(const Parts&... parts) {
  throw Error(str(parts...));
}

}  // namespace hybrid
