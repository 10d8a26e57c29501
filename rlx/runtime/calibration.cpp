#include "rlx/runtime/calibration.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "rlx/core/env.h"
#include "rlx/core/error.h"
#include "rlx/core/log.h"
#include "rlx/runtime/calibration_json.h"

#ifndef RLX_VERSION_STRING
#error "rlx_runtime is built with RLX_VERSION_STRING (rlx/runtime/CMakeLists.txt)"
#endif

namespace rlx {

using nlohmann::json;
namespace fs = std::filesystem;

std::string rlx_version() { return RLX_VERSION_STRING; }

std::string CalibrationIdentity::mismatch(const CalibrationIdentity& running) const {
  const std::pair<const char*, std::pair<const std::string*, const std::string*>> fields[] = {
      {"gpu_uuid", {&gpu_uuid, &running.gpu_uuid}}, {"gpu_name", {&gpu_name, &running.gpu_name}},
      {"driver", {&driver, &running.driver}},       {"cuda_runtime", {&cuda_runtime, &running.cuda_runtime}},
      {"cublaslt", {&cublaslt, &running.cublaslt}}, {"rlx_version", {&rlx, &running.rlx}},
  };
  for (const auto& [name, v] : fields)
    if (*v.first != *v.second) return str(name, " '", *v.first, "' (file) != '", *v.second, "' (this machine)");
  return {};
}

const VariantTiming* ShapeBucket::best() const {
  const VariantTiming* b = nullptr;
  for (const auto& v : variants)
    if (v.us > 0 && (!b || v.us < b->us)) b = &v;
  return b;
}

const ShapeBucket* Calibration::nearest(std::string_view family, const std::vector<int64_t>& shape,
                                        double* distance) const {
  const ShapeBucket* best = nullptr;
  double best_d = std::numeric_limits<double>::infinity();
  for (const auto& b : buckets) {
    if (b.family != family || b.shape.size() != shape.size() || !b.best()) continue;
    double d = 0;
    for (size_t i = 0; i < shape.size(); ++i)
      d += std::abs(std::log2(static_cast<double>(std::max<int64_t>(shape[i], 1))) -
                    std::log2(static_cast<double>(std::max<int64_t>(b.shape[i], 1))));
    if (d < best_d) best_d = d, best = &b;
  }
  if (distance) *distance = best_d;
  return best;
}

std::vector<std::string> Calibration::families() const {
  std::set<std::string> s;
  for (const auto& b : buckets) s.insert(b.family);
  return {s.begin(), s.end()};
}

std::string calibration_to_json(const Calibration& c) {
  json j;
  j["schema_version"] = Calibration::kSchemaVersion;
  put_identity(j, c.identity);
  j["created_utc"] = c.created_utc;
  j["measure_s"] = c.measure_s;
  j["complete"] = c.complete;
  j["problems"] = c.problems;
  j["launch_us"] = c.launch_us;
  j["graph_node_us"] = c.graph_node_us;
  j["sync_us"] = c.sync_us;
  j["d2d_gbps"] = c.d2d_gbps;
  j["h2d_gbps"] = c.h2d_gbps;
  j["d2h_gbps"] = c.d2h_gbps;
  json buckets = json::array();
  for (const auto& b : c.buckets) {
    json vs = json::array();
    for (const auto& v : b.variants)
      vs.push_back({{"variant", v.variant}, {"us", v.us}, {"gflops", v.gflops}, {"gbps", v.gbps}, {"config", v.config}});
    buckets.push_back({{"family", b.family}, {"shape", b.shape}, {"variants", vs}});
  }
  j["buckets"] = buckets;
  return j.dump(1);
}

namespace {

// Typed field access that names the field when it is missing or of the wrong type.
template <typename T>
T field(const json& j, const char* name, const std::string& where) {
  RLX_FORMAT_CHECK(j.is_object(), "calibration: ", where, " is not a JSON object");
  auto it = j.find(name);
  RLX_FORMAT_CHECK(it != j.end(), "calibration: ", where, " has no field '", name, "'");
  try {
    return it->get<T>();
  } catch (const json::exception& e) {
    throw FormatError(str("calibration: ", where, " field '", name, "' has the wrong type (", e.what(), ")"));
  }
}

}  // namespace

void put_identity(json& j, const CalibrationIdentity& id) {
  j["gpu_name"] = id.gpu_name;
  j["gpu_uuid"] = id.gpu_uuid;
  j["driver_version"] = id.driver;
  j["cuda_runtime_version"] = id.cuda_runtime;
  j["cublaslt_version"] = id.cublaslt;
  j["rlx_version"] = id.rlx;
}

CalibrationIdentity get_identity(const json& j) {
  const std::string top = "top level";
  CalibrationIdentity id;
  id.gpu_name = field<std::string>(j, "gpu_name", top);
  id.gpu_uuid = field<std::string>(j, "gpu_uuid", top);
  id.driver = field<std::string>(j, "driver_version", top);
  id.cuda_runtime = field<std::string>(j, "cuda_runtime_version", top);
  id.cublaslt = field<std::string>(j, "cublaslt_version", top);
  id.rlx = field<std::string>(j, "rlx_version", top);
  return id;
}

namespace {

double positive_or_zero(const json& j, const char* name, const std::string& where) {
  const double v = field<double>(j, name, where);
  RLX_FORMAT_CHECK(std::isfinite(v) && v >= 0, "calibration: ", where, " field '", name, "' = ", v,
                   " is not a finite non-negative number");
  return v;
}

}  // namespace

Calibration calibration_from_json(std::string_view text) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw FormatError(str("calibration: not valid JSON (", e.what(), ")"));
  }
  const std::string top = "top level";
  const int schema = field<int>(j, "schema_version", top);
  RLX_FORMAT_CHECK(schema == Calibration::kSchemaVersion, "calibration: schema_version ", schema, " (expected ",
                   Calibration::kSchemaVersion, ")");
  Calibration c;
  c.identity = get_identity(j);
  c.created_utc = field<std::string>(j, "created_utc", top);
  c.measure_s = positive_or_zero(j, "measure_s", top);
  c.complete = field<bool>(j, "complete", top);
  c.problems = field<std::vector<std::string>>(j, "problems", top);
  c.launch_us = positive_or_zero(j, "launch_us", top);
  c.graph_node_us = positive_or_zero(j, "graph_node_us", top);
  c.sync_us = positive_or_zero(j, "sync_us", top);
  c.d2d_gbps = positive_or_zero(j, "d2d_gbps", top);
  c.h2d_gbps = positive_or_zero(j, "h2d_gbps", top);
  c.d2h_gbps = positive_or_zero(j, "d2h_gbps", top);
  const auto buckets = field<json>(j, "buckets", top);
  RLX_FORMAT_CHECK(buckets.is_array(), "calibration: field 'buckets' is not an array");
  for (size_t i = 0; i < buckets.size(); ++i) {
    const std::string where = str("buckets[", i, "]");
    ShapeBucket b;
    b.family = field<std::string>(buckets[i], "family", where);
    b.shape = field<std::vector<int64_t>>(buckets[i], "shape", where);
    for (int64_t d : b.shape) RLX_FORMAT_CHECK(d >= 0, "calibration: ", where, " has a negative dim ", d);
    const auto vs = field<json>(buckets[i], "variants", where);
    RLX_FORMAT_CHECK(vs.is_array(), "calibration: ", where, " field 'variants' is not an array");
    for (size_t k = 0; k < vs.size(); ++k) {
      const std::string vw = str(where, ".variants[", k, "]");
      VariantTiming v;
      v.variant = field<std::string>(vs[k], "variant", vw);
      v.us = positive_or_zero(vs[k], "us", vw);
      v.gflops = positive_or_zero(vs[k], "gflops", vw);
      v.gbps = positive_or_zero(vs[k], "gbps", vw);
      v.config = field<std::vector<int64_t>>(vs[k], "config", vw);
      b.variants.push_back(std::move(v));
    }
    c.buckets.push_back(std::move(b));
  }
  return c;
}

std::string calibration_dir() {
  const std::string over = env_string("RLX_CALIB_DIR");
  if (!over.empty()) return over;
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg) return (fs::path(xdg) / "rlx").string();
  const char* home = std::getenv("HOME");
  RLX_CHECK(home && *home, "calibration: neither RLX_CALIB_DIR, XDG_CACHE_HOME nor HOME is set");
  return (fs::path(home) / ".cache" / "rlx").string();
}

std::string calibration_file(const std::string& stem, const std::string& gpu_uuid) {
  std::string safe = gpu_uuid;
  for (char& ch : safe)
    if (!std::isalnum(static_cast<unsigned char>(ch)) && ch != '-') ch = '_';
  return (fs::path(calibration_dir()) / str(stem, "-", safe, ".json")).string();
}

std::string calibration_path(const std::string& gpu_uuid) { return calibration_file("cuda-calib", gpu_uuid); }

void write_file_atomically(const std::string& path, const std::string& text) {
  const fs::path p(path);
  std::error_code ec;
  if (p.has_parent_path()) fs::create_directories(p.parent_path(), ec);
  RLX_CHECK(!ec, "cannot create the folder of '", path, "': ", ec.message());
  // Unique per process, so two processes writing at once never share a temporary.
  const fs::path tmp = fs::path(path + str(".tmp.", ::getpid()));
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    RLX_CHECK(f.good(), "cannot write '", tmp.string(), "'");
    f << text << "\n";
    f.close();
    RLX_CHECK(f.good(), "writing '", tmp.string(), "' failed");
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    fs::remove(tmp);
    throw InvalidArgument(str("cannot rename onto '", path, "': ", ec.message()));
  }
}

void save_calibration(const Calibration& c, const std::string& path) {
  try {
    write_file_atomically(path, calibration_to_json(c));
  } catch (const InvalidArgument& e) {
    throw InvalidArgument(str("calibration: ", e.what()));
  }
}

LoadResult load_calibration(const std::string& path, const CalibrationIdentity& running) {
  LoadResult r;
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    r.status = CalibrationLoad::Missing;
    r.why = str("no calibration file at ", path);
    log_verbose("calibration: ", r.why);
    return r;
  }
  std::stringstream ss;
  ss << f.rdbuf();
  try {
    Calibration c = calibration_from_json(ss.str());
    const std::string diff = c.identity.mismatch(running);
    if (!diff.empty()) {
      r.status = CalibrationLoad::Stale;
      r.why = str(path, " is for another setup: ", diff);
      log_verbose("calibration: ", r.why, "; measuring again");
      return r;
    }
    log_verbose("calibration: loaded ", path, " (", c.buckets.size(), " shape buckets, measured ", c.created_utc, ")");
    r.status = CalibrationLoad::Loaded;
    r.calibration = std::move(c);
  } catch (const FormatError& e) {
    r.status = CalibrationLoad::Corrupt;
    r.why = str(path, ": ", e.what());
    log_warn("ignoring calibration file ", r.why, "; it will be measured again");
  }
  return r;
}

}  // namespace rlx
