// The op conformance harness (ggml's test-backend-ops, for rlx): every case of
// cases.cpp runs on every registered backend, for each of its dtypes, against
// the float64 reference.
//
// - Backends come from the registry, so a backend registered later (CUDA) runs
//   unchanged; one without a device here is skipped ("unavailable").
// - A backend that throws rlx::Unsupported reports the case as SKIPPED with
//   "unsupported: <message>", counted apart from failures.
// - Outputs come back as fresh host tensors, so instead of poisoning them the
//   same executable runs twice with different random inputs (a kernel that
//   skips elements keeps stale values from the first run), and NaNs fail.
// - Tolerance is written once, per dtype (below); a case can only scale atol
//   by a multiplier it documents. Integer and bool outputs are exact.
// - A summary table (per backend: passed / failed / unsupported) is printed
//   when the suite ends.
#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <iomanip>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>

#include "rlx/runtime/backend_registry.h"
#include "rlx/runtime/session.h"
#include "tests/ops/cases.h"

namespace rlx::test {
namespace {

// |got − ref| ≤ atol·scale + rtol·|ref| — the one tolerance table.
struct Tolerance {
  double atol = 0.0;
  double rtol = 0.0;
};
Tolerance tolerance(DType t) {
  switch (t) {
    case DType::F32: return {1e-5, 1e-4};
    case DType::F16: return {2e-3, 2e-3};
    case DType::BF16: return {1.6e-2, 1.6e-2};
    case DType::F64: return {1e-12, 1e-10};
    default: return {0.0, 0.0};  // integers and bool: exact
  }
}

constexpr int kRuns = 2;  // each run with fresh random inputs (see header)
constexpr int kShownMismatches = 10;

// ---- results, summarized at the end ----

struct Tally {
  int passed = 0, failed = 0, unsupported = 0, unavailable = 0;
  std::vector<std::string> failed_names;
  std::map<std::string, int> unsupported_ops;  // reason (node ids dropped) → count
};

std::mutex g_mu;
std::map<std::string, Tally>& tallies() {
  static std::map<std::string, Tally> t;
  return t;
}

void record(const std::string& backend, const std::function<void(Tally&)>& f) {
  std::lock_guard lock(g_mu);
  f(tallies()[backend]);
}

// One Session per backend, shared by all cases; released when the suite ends
// (before static destruction, so device backends tear down while the driver is alive).
std::map<std::string, std::unique_ptr<Session>>& sessions() {
  static std::map<std::string, std::unique_ptr<Session>> s;
  return s;
}

class SummaryEnvironment : public ::testing::Environment {
 public:
  void TearDown() override {
    std::lock_guard lock(g_mu);
    sessions().clear();
    if (tallies().empty()) return;
    std::ostringstream os;
    os << "\n[ conformance ] " << std::left << std::setw(10) << "backend" << std::right << std::setw(8) << "passed"
       << std::setw(8) << "failed" << std::setw(13) << "unsupported" << std::setw(13) << "unavailable"
       << "\n";
    for (const auto& [name, t] : tallies())
      os << "[ conformance ] " << std::left << std::setw(10) << name << std::right << std::setw(8) << t.passed
         << std::setw(8) << t.failed << std::setw(13) << t.unsupported << std::setw(13) << t.unavailable << "\n";
    for (const auto& [name, t] : tallies()) {
      for (const auto& f : t.failed_names) os << "[ conformance ] FAILED " << f << "\n";
      for (const auto& [why, n] : t.unsupported_ops)
        os << "[ conformance ] unsupported on " << name << " (" << n << "x): " << why << "\n";
    }
    std::fputs(os.str().c_str(), stdout);
    std::fflush(stdout);
  }
};

[[maybe_unused]] ::testing::Environment* const g_summary = ::testing::AddGlobalTestEnvironment(new SummaryEnvironment);

// ---- parameters ----

struct Param {
  std::string backend;
  size_t case_index = 0;
  DType dtype = DType::F32;
  std::string name;  // <backend>_<case>_<dtype>
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.name; }

// Called by gtest when it registers tests (after static initialization).
std::vector<Param> all_params() {
  register_builtin_backends();
  std::vector<Param> ps;
  for (const std::string& backend : registered_backends()) {
    const auto& cases = op_cases();
    for (size_t i = 0; i < cases.size(); ++i)
      for (DType dt : cases[i].dtypes) ps.push_back(Param{backend, i, dt, str(backend, "_", cases[i].name, "_", dt)});
  }
  return ps;
}

Session& session_for(const std::string& backend) {
  std::lock_guard lock(g_mu);
  auto& s = sessions()[backend];
  if (!s) s = std::make_unique<Session>(backend);
  return *s;
}

// FNV-1a: the same data on every backend, a different draw per run.
uint64_t seed_for(const std::string& case_name, DType dt, int run) {
  uint64_t h = 1469598103934665603ull;
  for (char c : str(case_name, "/", dt, "/", run)) h = (h ^ static_cast<uint8_t>(c)) * 1099511628211ull;
  return h;
}

std::string fmt(double v) {
  std::ostringstream os;
  os << std::setprecision(8) << v;
  return os.str();
}

// Compares one output; returns an empty string when it conforms, else a report
// listing the first mismatches with their indices.
std::string check_output(const std::string& label, const Tensor& got, const TensorType& want, const RefTensor& ref,
                         Check check, double atol_scale, const std::string& atol_why) {
  std::ostringstream os;
  if (got.dtype() != want.dtype) return str(label, ": dtype ", got.dtype(), ", expected ", want.dtype);
  const std::vector<int64_t> want_shape = check == Check::AllowedIndex ? std::vector<int64_t>{ref.dim(0)} : ref.shape;
  if (got.shape() != want_shape)
    return str(label, ": shape ", shape_str(got.shape()), ", expected ", shape_str(want_shape));
  const std::vector<double> g = got.to_f64();
  const Tolerance tol = tolerance(want.dtype);
  const bool exact = !is_float(want.dtype);
  const double atol = tol.atol * atol_scale;

  int64_t bad = 0, nans = 0;
  double max_err = 0.0;
  std::ostringstream shown;
  for (int64_t i = 0; i < static_cast<int64_t>(g.size()); ++i) {
    const double gv = g[static_cast<size_t>(i)];
    bool ok;
    std::string detail;
    if (check == Check::AllowedIndex) {
      const int64_t v = ref.dim(1);
      ok = gv >= 0 && gv < static_cast<double>(v) && gv == std::floor(gv) &&
           ref[i * v + static_cast<int64_t>(gv)] != 0.0;
      int64_t allowed = 0;
      for (int64_t j = 0; j < v; ++j) allowed += ref[i * v + j] != 0.0;
      detail = str("got ", fmt(gv), ", not among the ", allowed, " allowed indices");
    } else {
      const double rv = ref[i];
      if (std::isnan(gv)) ++nans;
      const double err = std::fabs(gv - rv);
      ok = exact ? gv == rv : (gv == rv || err <= atol + tol.rtol * std::fabs(rv));
      if (!std::isnan(err)) max_err = std::max(max_err, err);
      detail = str("got ", fmt(gv), "  ref ", fmt(rv), "  |err| ", fmt(err));
    }
    if (ok) continue;
    if (bad++ < kShownMismatches) shown << "\n    " << index_str(unravel(i, got.shape())) << ": " << detail;
  }
  if (bad == 0) return {};
  os << label << " (" << want.to_string() << "): " << bad << " of " << g.size() << " elements wrong";
  if (nans) os << ", " << nans << " NaN";
  if (check == Check::Auto && !exact) {
    os << "; max |err| " << fmt(max_err) << "; tolerance |got - ref| <= " << fmt(atol) << " + " << fmt(tol.rtol)
       << "*|ref|";
    if (atol_scale != 1.0) os << " (" << atol_why << ")";
  } else if (exact) {
    os << "; exact match required";
  }
  os << shown.str();
  if (bad > kShownMismatches) os << "\n    ... and " << bad - kShownMismatches << " more";
  return os.str();
}

// Compiles the case once and runs it kRuns times. Throws Unsupported when the
// backend cannot run it; gtest assertions record everything else.
void run_case(const Param& p, const OpCase& c, CaseBuilder& b) {
  std::shared_ptr<Executable> exe = session_for(p.backend).compile(b.graph);
  for (int run = 0; run < kRuns; ++run) {
    Rng rng(seed_for(c.name, p.dtype, run));
    Feeds f = generate(b, rng);
    for (const auto& [name, t] : f.params) exe->set_param(name, t);
    for (const auto& [name, t] : f.states) exe->write_state(name, t);
    const std::map<std::string, Tensor> outs = exe->run_named(f.inputs);
    const std::vector<RefTensor> refs = b.reference()(f.values);
    ASSERT_EQ(refs.size(), b.checks().size()) << c.name << ": the reference returns the wrong number of outputs";
    bool ok = true;
    for (const auto& [out_name, id] : b.graph.outputs()) {
      const size_t i = std::stoul(out_name.substr(3));  // "out<i>"
      auto it = outs.find(out_name);
      ASSERT_TRUE(it != outs.end()) << p.name << ": the backend returned no output " << out_name;
      const std::string report =
          check_output(str(out_name, " (run ", run + 1, " of ", kRuns, ")"), it->second, b.graph.node(id).type, refs[i],
                       b.checks()[i], b.atol_scale(), b.atol_why());
      EXPECT_TRUE(report.empty()) << p.name << "\n  " << report;
      ok = ok && report.empty();
    }
    if (!ok) return;
  }
}

// "node %12 (Attention)\n  ..." → one line without node ids, so that one
// missing kernel is one summary line however many cases hit it.
std::string unsupported_key(const std::string& msg) {
  std::string out;
  bool space = false;
  for (size_t i = 0; i < msg.size(); ++i) {
    const char ch = msg[i];
    if (ch == '%') {
      if (space && !out.empty()) out += ' ';
      space = false;
      while (i + 1 < msg.size() && std::isdigit(static_cast<unsigned char>(msg[i + 1]))) ++i;
      out += '%';
      continue;
    }
    if (std::isspace(static_cast<unsigned char>(ch))) {
      space = true;
      continue;
    }
    if (space && !out.empty()) out += ' ';
    space = false;
    out += ch;
  }
  return out.size() > 200 ? out.substr(0, 200) + "..." : out;
}

class OpConformance : public ::testing::TestWithParam<Param> {};

TEST_P(OpConformance, Run) {
  const Param& p = GetParam();
  if (!backend_available(p.backend)) {
    record(p.backend, [](Tally& t) { ++t.unavailable; });
    GTEST_SKIP() << "backend '" << p.backend << "' has no device on this machine";
  }
  const OpCase& c = op_cases()[p.case_index];
  CaseBuilder b(p.dtype);
  c.define(b);
  ASSERT_TRUE(b.reference()) << "case " << c.name << " sets no reference";

  std::string unsupported;
  try {
    run_case(p, c, b);
  } catch (const Unsupported& e) {
    unsupported = e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << p.name << " threw: " << e.what();
  }
  if (!unsupported.empty() && !HasFailure()) {
    record(p.backend, [&](Tally& t) {
      ++t.unsupported;
      ++t.unsupported_ops[unsupported_key(unsupported)];
    });
    GTEST_SKIP() << "unsupported: " << unsupported;
  }
  record(p.backend, [&](Tally& t) {
    if (HasFailure()) {
      ++t.failed;
      t.failed_names.push_back(p.name);
    } else {
      ++t.passed;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Conformance, OpConformance, ::testing::ValuesIn(all_params()),
                         [](const ::testing::TestParamInfo<Param>& info) { return info.param.name; });

}  // namespace
}  // namespace rlx::test
