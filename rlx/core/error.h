// Error policy: every failure is a typed exception whose message starts with
// the thing in question (node, op, file, field). No exit/abort in library code.
#pragma once
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace rlx {

// Concatenate anything streamable into a string: str("node ", id, ": ", msg).
template <typename... Args>
std::string str(Args&&... args) {
  std::ostringstream os;
  (os << ... << std::forward<Args>(args));
  return os.str();
}

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
// Graph or input shapes/dtypes that do not fit an op.
class ShapeError : public Error { using Error::Error; };
// An op, dtype or feature a backend does not implement.
class Unsupported : public Error { using Error::Error; };
// A malformed or hostile file (GGUF, safetensors, tokenizer, JSON).
class FormatError : public Error { using Error::Error; };
// Bad API use: unknown name, missing param, wrong typed access.
class InvalidArgument : public Error { using Error::Error; };
// A device runtime call (CUDA, cuBLAS, cuDNN, NVRTC) failed.
class DeviceError : public Error { using Error::Error; };
// Host or device allocation failed; the message names requested and free sizes.
class OutOfMemory : public DeviceError { using DeviceError::DeviceError; };

}  // namespace rlx

// Throws `Type` with file:line when `cond` is false. Message parts are streamed.
#define RLX_CHECK_AS(Type, cond, ...)                                        \
  do {                                                                       \
    if (!(cond)) [[unlikely]]                                                \
      throw Type(::rlx::str(__VA_ARGS__));                                   \
  } while (0)
#define RLX_CHECK(cond, ...) RLX_CHECK_AS(::rlx::InvalidArgument, cond, __VA_ARGS__)
#define RLX_SHAPE_CHECK(cond, ...) RLX_CHECK_AS(::rlx::ShapeError, cond, __VA_ARGS__)
#define RLX_FORMAT_CHECK(cond, ...) RLX_CHECK_AS(::rlx::FormatError, cond, __VA_ARGS__)
// Internal invariant: a bug in rlx, not in the caller's input.
#define RLX_ASSERT(cond)                                                     \
  RLX_CHECK_AS(::rlx::Error, cond, "internal error: ", #cond, " at ", __FILE__, ":", __LINE__)
