#include "rlx/ir/custom_op.h"

#include <map>
#include <mutex>

#include "rlx/core/error.h"

namespace rlx {
namespace {

struct CustomOps {
  std::mutex mu;
  std::map<std::string, CustomOpDef> defs;
};

CustomOps& custom_ops() {
  static CustomOps ops;
  return ops;
}

}  // namespace

void register_custom_op(CustomOpDef def) {
  RLX_CHECK(!def.name.empty(), "register_custom_op: empty name");
  RLX_CHECK(def.infer, "register_custom_op '", def.name, "': no shape inference function");
  RLX_CHECK(def.min_inputs >= 0 && def.max_inputs >= def.min_inputs, "register_custom_op '", def.name,
            "': bad input count range");
  auto& ops = custom_ops();
  std::lock_guard lock(ops.mu);
  ops.defs[def.name] = std::move(def);
}

const CustomOpDef& find_custom_op(const std::string& name) {
  auto& ops = custom_ops();
  std::lock_guard lock(ops.mu);
  auto it = ops.defs.find(name);
  if (it == ops.defs.end()) throw Unsupported(str("custom op '", name, "' is not registered"));
  return it->second;  // map nodes are stable
}

bool has_custom_op(const std::string& name) {
  auto& ops = custom_ops();
  std::lock_guard lock(ops.mu);
  return ops.defs.count(name) != 0;
}

}  // namespace rlx
