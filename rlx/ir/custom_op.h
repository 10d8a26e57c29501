// Shape inference for user-registered Custom ops. Kernels for them are
// registered per backend in rlx/runtime/kernel_registry.h.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "rlx/ir/ops.h"

namespace rlx {

using CustomShapeFn = std::function<TensorType(const std::vector<TensorType>& inputs, const CustomAttrs& attrs)>;

struct CustomOpDef {
  std::string name;
  int min_inputs = 1;
  int max_inputs = 1;
  CustomShapeFn infer;
};

// Registers (or replaces) a custom op definition; thread-safe.
void register_custom_op(CustomOpDef def);
// Throws Unsupported naming the op when it was never registered.
const CustomOpDef& find_custom_op(const std::string& name);
bool has_custom_op(const std::string& name);

}  // namespace rlx
