#include "rlx/runtime/kernel_registry.h"

#include <sstream>

namespace rlx {

KernelRegistry& KernelRegistry::global() {
  static KernelRegistry r;
  return r;
}

namespace {

bool same_key(const KernelKey& a, const KernelKey& b) {
  return a.op == b.op && a.backend == b.backend && a.dtypes == b.dtypes && a.custom_name == b.custom_name &&
         a.variadic == b.variadic;
}

// Returns -1 when `key` does not match `sig`, else the number of wildcards used.
int match(const KernelKey& key, const std::vector<DType>& sig) {
  const auto& p = key.dtypes;
  if (p.empty()) return -1;
  const size_t n_in = sig.size() - 1, p_in = p.size() - 1;
  if (key.variadic ? (n_in < p_in || p_in == 0) : n_in != p_in) return -1;
  int wild = 0;
  for (size_t i = 0; i < sig.size(); ++i) {
    DType want = i == n_in ? p.back() : p[std::min(i, p_in - 1)];
    if (want == kAnyDType) ++wild;
    else if (want != sig[i]) return -1;
  }
  return wild;
}

}  // namespace

void KernelRegistry::add(KernelKey key, std::any impl, std::string description) {
  std::lock_guard lock(mu_);
  for (auto& e : entries_) {
    if (same_key(e.key, key)) {
      e.impl = std::move(impl);
      e.description = std::move(description);
      return;
    }
  }
  entries_.push_back(KernelEntry{std::move(key), std::move(description), std::move(impl)});
}

std::vector<DType> KernelRegistry::signature(const Graph& g, NodeId id) {
  const Node& n = g.node(id);
  std::vector<DType> sig;
  for (NodeId in : n.inputs) sig.push_back(g.node(in).type.dtype);
  sig.push_back(n.type.dtype);
  return sig;
}

const KernelEntry* KernelRegistry::find(const std::string& backend, const Graph& g, NodeId id) const {
  const Node& n = g.node(id);
  const std::string custom = n.op == OpKind::Custom ? n.attr<CustomAttrs>().name : std::string();
  const auto sig = signature(g, id);
  std::lock_guard lock(mu_);
  const KernelEntry* best = nullptr;
  int best_wild = 1 << 30;
  for (const auto& e : entries_) {
    if (e.key.op != n.op || e.key.backend != backend || e.key.custom_name != custom) continue;
    int w = match(e.key, sig);
    if (w >= 0 && w < best_wild) {
      best = &e;
      best_wild = w;
    }
  }
  return best;
}

const KernelEntry* KernelRegistry::find_exact(const KernelKey& key) const {
  std::lock_guard lock(mu_);
  for (const auto& e : entries_)
    if (same_key(e.key, key)) return &e;
  return nullptr;
}

std::vector<KernelKey> KernelRegistry::keys(const std::string& backend) const {
  std::lock_guard lock(mu_);
  std::vector<KernelKey> out;
  for (const auto& e : entries_)
    if (e.key.backend == backend) out.push_back(e.key);
  return out;
}

std::string signature_to_string(const std::vector<DType>& dtypes) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i + 1 < dtypes.size(); ++i)
    os << (i ? "," : "") << (dtypes[i] == kAnyDType ? "*" : dtype_name(dtypes[i]));
  os << ")->" << (dtypes.empty() ? "?" : dtypes.back() == kAnyDType ? "*" : dtype_name(dtypes.back()));
  return os.str();
}

}  // namespace rlx
