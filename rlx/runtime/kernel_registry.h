// Kernels keyed by (op, backend, dtypes). A dtype signature lists each
// input's dtype and then the output's; `kAnyDType` matches anything, and a
// variadic entry repeats its last input dtype for extra inputs (Concat).
// Custom ops add their registered name to the key. The stored kernel is
// backend-specific (e.g. rlx::cpu::CpuKernel) and held type-erased.
#pragma once
#include <any>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "rlx/ir/graph.h"

namespace rlx {

inline constexpr DType kAnyDType = DType::Count_;

struct KernelKey {
  OpKind op;
  std::string backend;
  std::vector<DType> dtypes;  // inputs..., output
  std::string custom_name;    // only for OpKind::Custom
  bool variadic = false;
};

struct KernelEntry {
  KernelKey key;
  std::string description;  // shown in the dispatch report
  std::any impl;
};

class KernelRegistry {
 public:
  static KernelRegistry& global();
  // A later registration with the same key replaces the earlier one.
  void add(KernelKey key, std::any impl, std::string description);
  // Best match for node `id` of `g` on `backend` (exact before wildcard), or null.
  const KernelEntry* find(const std::string& backend, const Graph& g, NodeId id) const;
  // The entry registered under exactly `key`, or null (to wrap a kernel:
  // copy its impl, then register the wrapper under the same key).
  const KernelEntry* find_exact(const KernelKey& key) const;
  // Signature of a node as used for lookup: input dtypes, then output dtype.
  static std::vector<DType> signature(const Graph& g, NodeId id);
  std::vector<KernelKey> keys(const std::string& backend) const;

 private:
  mutable std::mutex mu_;
  std::deque<KernelEntry> entries_;  // deque: find() results stay valid as kernels are added
};

std::string signature_to_string(const std::vector<DType>& dtypes);

}  // namespace rlx
