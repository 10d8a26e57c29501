#include "rlx/runtime/executable.h"

#include <chrono>
#include <iostream>

#include "rlx/core/env.h"
#include "rlx/core/log.h"

namespace rlx {

Executable::~Executable() { discard_queued(); }

Executable::Executable(std::shared_ptr<Backend> backend, Graph lowered, CompileOptions options)
    : backend_(std::move(backend)), graph_(std::move(lowered)), options_(options) {
  for (NodeId i = 0; i < graph_.size(); ++i) {
    const Node& n = graph_.node(i);
    if (n.op == OpKind::Input) inputs_.push_back(i);
    if (n.op != OpKind::Param && n.op != OpKind::State) continue;
    const auto bytes = static_cast<size_t>(dtype_bytes(n.type.dtype, static_numel(n.type.shape)));
    auto buf = backend_->allocate(bytes);
    const std::string& name = n.attr<LeafAttrs>().name;
    if (n.op == OpKind::Param) {
      buffers_.params[name] = std::move(buf);
      param_set_[name] = false;
    } else {
      buf->fill_zero();
      buffers_.states[name] = std::move(buf);
    }
  }
}

void Program::launch(const std::vector<Tensor>&, const std::vector<Feed>&) {
  throw Unsupported("this backend's programs cannot queue runs");
}

std::vector<Tensor> Program::finish() { throw Unsupported("this backend's programs cannot queue runs"); }

void Executable::set_param(const std::string& name, const Tensor& value) {
  check_not_queued("set_param");
  NodeId id = graph_.find_leaf(OpKind::Param, name);
  if (id < 0) {
    std::string known;
    for (const auto& [k, _] : buffers_.params) known += (known.empty() ? "" : ", ") + k;
    throw InvalidArgument(str("set_param: the graph has no param '", name, "' (params: ", known, ")"));
  }
  const TensorType& t = graph_.node(id).type;
  RLX_SHAPE_CHECK(make_shape(value.shape()) == t.shape, "set_param '", name, "': shape ", shape_str(value.shape()),
                  " does not match the declared ", shape_to_string(t.shape));
  Tensor v = value;
  if (v.dtype() != t.dtype) {
    RLX_CHECK(is_float(v.dtype()) && is_float(t.dtype), "set_param '", name, "': got ", v.dtype(), " data for a ",
              t.dtype, " param");
    v = v.to(t.dtype);
  }
  buffers_.params.at(name)->upload(v.raw(), v.nbytes());
  param_set_[name] = true;
}

bool Executable::has_param(const std::string& name) const { return buffers_.params.count(name) != 0; }

std::vector<std::string> Executable::param_names() const {
  std::vector<std::string> out;
  for (const auto& [k, _] : buffers_.params) out.push_back(k);
  return out;
}

std::vector<std::string> Executable::missing_params() const {
  std::vector<std::string> out;
  for (const auto& [k, set] : param_set_)
    if (!set) out.push_back(k);
  return out;
}

std::vector<std::string> Executable::input_names() const {
  std::vector<std::string> out;
  for (NodeId id : inputs_) out.push_back(graph_.node(id).attr<LeafAttrs>().name);
  return out;
}

std::vector<std::string> Executable::output_names() const {
  std::vector<std::string> out;
  for (const auto& [name, _] : graph_.outputs()) out.push_back(name);
  return out;
}

SymbolBinding Executable::bind(const std::vector<Tensor>& inputs) const {
  RLX_CHECK(inputs.size() == inputs_.size(), "run: expected ", inputs_.size(), " inputs, got ", inputs.size());
  SymbolBinding b;
  std::map<std::string, std::string> bound_by;
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Node& n = graph_.node(inputs_[i]);
    const std::string& name = n.attr<LeafAttrs>().name;
    const Tensor& t = inputs[i];
    RLX_CHECK(t.defined(), "input '", name, "' has no data");
    RLX_CHECK(t.dtype() == n.type.dtype, "input '", name, "': expected dtype ", n.type.dtype, ", got ", t.dtype());
    RLX_SHAPE_CHECK(t.rank() == n.type.rank(), "input '", name, "': expected rank ", n.type.rank(), " ",
                    shape_to_string(n.type.shape), ", got ", shape_str(t.shape()));
    for (int d = 0; d < t.rank(); ++d) {
      const Dim& want = n.type.shape[static_cast<size_t>(d)];
      const int64_t got = t.shape()[static_cast<size_t>(d)];
      if (want.is_static()) {
        RLX_SHAPE_CHECK(want.value == got, "input '", name, "' dim ", d, ": expected ", want.value, ", got ", got,
                        " (shape ", shape_str(t.shape()), ")");
        continue;
      }
      auto [it, fresh] = b.emplace(want.symbol, got);
      if (fresh) {
        bound_by[want.symbol] = str("input '", name, "' dim ", d);
      } else {
        RLX_SHAPE_CHECK(it->second == got, "input '", name, "' dim ", d, ": symbol '", want.symbol, "' is ", got,
                        " here but ", it->second, " in ", bound_by[want.symbol]);
      }
    }
  }
  return b;
}

Program& Executable::program_for(const SymbolBinding& b) {
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->binding == b) {
      cache_.splice(cache_.begin(), cache_, it);
      return *cache_.front().program;
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  Graph g = specialize(graph_, b);
  auto program = backend_->compile(g, options_, buffers_);
  if (verbose()) {
    std::string symbols;
    for (const auto& [name, value] : b) symbols += str(symbols.empty() ? "" : ", ", name, "=", value);
    log_verbose("compiled a specialization (", symbols.empty() ? "static shapes" : symbols, ") in ",
                std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count(), " ms");
  }
  if (env_bool("RLX_DISPATCH_REPORT")) std::cerr << program->dispatch_report();
  cache_.push_front(Entry{b, std::move(program)});
  const auto limit = static_cast<size_t>(std::max<int64_t>(1, env_int("RLX_COMPILE_CACHE")));
  while (cache_.size() > limit) cache_.pop_back();
  return *cache_.front().program;
}

void Executable::check_params_set() const {
  auto missing = missing_params();
  if (missing.empty()) return;
  std::string list;
  for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
  throw InvalidArgument(str("run: params not set: ", list));
}

void Executable::check_not_queued(const char* what) const {
  RLX_CHECK(queued_.empty(), what, ": ", queued_.size(), " queued run(s) are not finished (call finish() first)");
}

std::vector<Tensor> Executable::run(const std::vector<Tensor>& inputs) {
  check_not_queued("run");
  check_params_set();
  Program& p = program_for(bind(inputs));
  last_ = &p;
  fed_from_ = nullptr;  // a failed run leaves nothing to feed from
  auto outs = p.run(inputs);
  fed_from_ = &p;
  if (!backend_->can_queue()) host_last_outputs_ = outs;
  return outs;
}

void Executable::launch(const std::vector<Tensor>& inputs, const std::vector<Feed>& feeds) {
  check_params_set();
  const auto& outputs = graph_.outputs();
  for (const Feed& f : feeds) {
    RLX_CHECK(f.input < inputs_.size(), "launch: feed input index ", f.input, " is out of range (", inputs_.size(),
              " inputs)");
    RLX_CHECK(f.output < outputs.size(), "launch: feed output index ", f.output, " is out of range (",
              outputs.size(), " outputs)");
    const Node& in = graph_.node(inputs_[f.input]);
    const Node& out = graph_.node(outputs[f.output].second);
    RLX_CHECK(in.type.dtype == out.type.dtype, "launch: input '", in.attr<LeafAttrs>().name, "' (", in.type.dtype,
              ") cannot be fed from output '", outputs[f.output].first, "' (", out.type.dtype, ")");
  }
  SymbolBinding b = bind(inputs);
  RLX_CHECK(queued_.empty() || b == queued_binding_,
            "launch: the queued runs have other input shapes; finish() them before launching this one");
  Program& p = program_for(b);
  RLX_CHECK(feeds.empty() || fed_from_ == &p,
            "launch: a fed input takes an output of the previous run, which must have had the same input shapes "
            "and succeeded");
  last_ = &p;
  fed_from_ = nullptr;
  if (backend_->can_queue()) {
    p.launch(inputs, feeds);
    queued_.push_back({&p, false, {}});
  } else {
    std::vector<Tensor> ins = inputs;
    for (const Feed& f : feeds) {
      const Tensor& from = host_last_outputs_.at(f.output);
      RLX_SHAPE_CHECK(from.numel() == inputs[f.input].numel(), "launch: input ", f.input, " has ",
                      inputs[f.input].numel(), " elements but the output it is fed from has ", from.numel());
      ins[f.input] = from.reshaped(inputs[f.input].shape());
    }
    auto outs = p.run(ins);
    host_last_outputs_ = outs;
    queued_.push_back({&p, true, std::move(outs)});
  }
  queued_binding_ = std::move(b);
  fed_from_ = &p;
}

std::vector<Tensor> Executable::finish() {
  RLX_CHECK(!queued_.empty(), "finish: no run is queued");
  Queued q = std::move(queued_.front());
  queued_.pop_front();
  if (q.ran) return std::move(q.outputs);
  try {
    return q.program->finish();
  } catch (...) {
    fed_from_ = nullptr;  // the failed run's outputs are no input for the next
    throw;
  }
}

void Executable::discard_queued() noexcept {
  while (!queued_.empty()) {
    try {
      finish();
    } catch (...) {  // the run's error does not matter to a caller that drops its outputs
    }
  }
}

std::map<std::string, Tensor> Executable::run_named(const std::map<std::string, Tensor>& inputs) {
  std::vector<Tensor> ordered;
  for (NodeId id : inputs_) {
    const std::string& name = graph_.node(id).attr<LeafAttrs>().name;
    auto it = inputs.find(name);
    RLX_CHECK(it != inputs.end(), "run: input '", name, "' not given");
    ordered.push_back(it->second);
  }
  for (const auto& [name, _] : inputs)
    RLX_CHECK(graph_.find_leaf(OpKind::Input, name) >= 0, "run: the graph has no input '", name, "'");
  auto outs = run(ordered);
  std::map<std::string, Tensor> named;
  for (size_t i = 0; i < outs.size(); ++i) named[graph_.outputs()[i].first] = outs[i];
  return named;
}

Tensor Executable::read_state(const std::string& name) const {
  check_not_queued("read_state");
  NodeId id = graph_.find_leaf(OpKind::State, name);
  RLX_CHECK(id >= 0, "read_state: no state '", name, "'");
  const TensorType& t = graph_.node(id).type;
  Tensor out = Tensor::empty(t.dtype, static_dims(t.shape));
  buffers_.states.at(name)->download(out.raw_mut(), out.nbytes());
  return out;
}

void Executable::write_state(const std::string& name, const Tensor& value) {
  check_not_queued("write_state");
  NodeId id = graph_.find_leaf(OpKind::State, name);
  RLX_CHECK(id >= 0, "write_state: no state '", name, "'");
  const TensorType& t = graph_.node(id).type;
  RLX_CHECK(value.dtype() == t.dtype && make_shape(value.shape()) == t.shape, "write_state '", name, "': expected ",
            t.to_string(), ", got ", value.dtype(), shape_str(value.shape()));
  buffers_.states.at(name)->upload(value.raw(), value.nbytes());
}

void Executable::reset_states() {
  check_not_queued("reset_states");
  for (auto& [_, buf] : buffers_.states) buf->fill_zero();
}

std::string Executable::dispatch_report() const { return last_ ? last_->dispatch_report() : std::string(); }

}  // namespace rlx
