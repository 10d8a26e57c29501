#include "rlx/runtime/options.h"

#include "rlx/core/error.h"

namespace rlx {

std::string CompileOptions::key() const {
  return str("precision=", dtype_name(precision), ";tf32=", allow_tf32, ";fuse=", fuse, ";graphs=", cuda_graphs);
}

}  // namespace rlx
