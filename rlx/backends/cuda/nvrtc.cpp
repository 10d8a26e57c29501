#include "rlx/backends/cuda/nvrtc.h"

#include <cuda_runtime.h>
#include <nvrtc.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "rlx/backends/cuda/cuda_check.h"
#include "rlx/backends/cuda/device.h"
#include "rlx/core/env.h"
#include "rlx/core/log.h"

// NVRTC calls that can only fail for reasons outside the user's source.
#define RLX_NVRTC_CHECK(call)                                                                         \
  do {                                                                                                \
    nvrtcResult rlx_res_ = (call);                                                                    \
    if (rlx_res_ != NVRTC_SUCCESS) [[unlikely]]                                                       \
      throw ::rlx::DeviceError(::rlx::str("NVRTC error ", nvrtcGetErrorString(rlx_res_), " in ", #call, \
                                          " at ", __FILE__, ":", __LINE__));                          \
  } while (0)

namespace rlx::cuda {
namespace {

namespace fs = std::filesystem;

constexpr char kMagic[] = "RLXNVRTC1\n";  // cache file format version
constexpr uint64_t kMaxCacheFile = uint64_t{1} << 30;

struct Stats {
  std::atomic<int64_t> compiles{0}, disk_hits{0}, disk_writes{0}, disk_rejected{0};
};
Stats& stats() {
  static Stats s;
  return s;
}

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

std::string arch_of(const NvrtcRequest& r) { return str("sm_", r.cc_major, r.cc_minor); }

std::string nvrtc_version() {
  int major = 0, minor = 0;
  RLX_NVRTC_CHECK(nvrtcVersion(&major, &minor));
  return str(major, ".", minor);
}

// Everything the cubin depends on, each field length-prefixed so no two
// requests share a key.
std::string cache_key(const NvrtcRequest& r) {
  std::string k;
  auto field = [&](const std::string& s) { k += str(s.size(), ":", s, ";"); };
  field("nvrtc " + nvrtc_version());
  field(arch_of(r));
  field(r.entry);
  for (const auto& o : r.options) field(o);
  field(r.source);
  return k;
}

std::string hex64(uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<size_t>(i)] = d[v & 15];
  return s;
}

fs::path cache_dir() {
  if (!env_bool("RLX_NVRTC_CACHE")) return {};
  const char* xdg = std::getenv("XDG_CACHE_HOME");
  if (xdg && *xdg == '/') return fs::path(xdg) / "rlx" / "nvrtc";  // relative values are invalid per the XDG spec
  const char* home = std::getenv("HOME");
  if (home && *home) return fs::path(home) / ".cache" / "rlx" / "nvrtc";
  return {};
}

void put_u64(std::string& out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

// File: magic, then (u64 length, bytes) for key, lowered name and cubin, then
// a u64 FNV-1a checksum of everything before it.
std::string encode(const std::string& key, const NvrtcBinary& b) {
  std::string out = kMagic;
  for (const std::string* s : {&key, &b.lowered_name, &b.cubin}) {
    put_u64(out, s->size());
    out += *s;
  }
  put_u64(out, fnv1a(out));
  return out;
}

// Returns false (and says why) for anything but an intact file for `key`.
bool decode(const std::string& data, const std::string& key, NvrtcBinary& b, std::string& why) {
  const size_t magic_len = sizeof(kMagic) - 1;
  if (data.size() < magic_len + 8 || data.compare(0, magic_len, kMagic) != 0) return why = "bad header", false;
  size_t pos = magic_len;
  auto get_u64 = [&](uint64_t& v) {
    if (data.size() - pos < 8) return false;
    v = 0;
    for (int i = 0; i < 8; ++i) v |= uint64_t{static_cast<unsigned char>(data[pos + static_cast<size_t>(i)])} << (8 * i);
    pos += 8;
    return true;
  };
  std::string fields[3];
  for (auto& f : fields) {
    uint64_t n = 0;
    if (!get_u64(n) || n > data.size() - pos) return why = "truncated", false;
    f = data.substr(pos, n);
    pos += n;
  }
  const uint64_t body_end = pos;
  uint64_t sum = 0;
  if (!get_u64(sum) || pos != data.size()) return why = "truncated or trailing bytes", false;
  if (sum != fnv1a(data.substr(0, body_end))) return why = "checksum mismatch", false;
  if (fields[0] != key) return why = "written for another kernel (hash collision)", false;
  if (fields[2].empty()) return why = "empty cubin", false;
  b.lowered_name = std::move(fields[1]);
  b.cubin = std::move(fields[2]);
  return true;
}

bool read_file(const fs::path& p, std::string& out) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return false;
  f.seekg(0, std::ios::end);
  const auto size = static_cast<uint64_t>(std::max<std::streamoff>(f.tellg(), 0));
  if (size > kMaxCacheFile) return false;
  out.resize(size);
  f.seekg(0);
  return static_cast<bool>(f.read(out.data(), static_cast<std::streamsize>(size)));
}

// Writes through a temporary file and a rename, so a reader never sees half a file.
void write_cache(const fs::path& p, const std::string& data) {
  static std::atomic<int> counter{0};
  std::error_code ec;
  fs::create_directories(p.parent_path(), ec);
  const fs::path tmp = p.string() + str(".tmp.", getpid(), ".", counter++);
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (f) f.write(data.data(), static_cast<std::streamsize>(data.size()));
    if (!f) {
      log_warn("NVRTC cache: cannot write ", tmp.string(), "; continuing without caching");
      fs::remove(tmp, ec);
      return;
    }
  }
  fs::rename(tmp, p, ec);
  if (ec) {
    log_warn("NVRTC cache: cannot rename into ", p.string(), ": ", ec.message());
    fs::remove(tmp, ec);
    return;
  }
  ++stats().disk_writes;
}

class ProgramGuard {
 public:
  explicit ProgramGuard(nvrtcProgram p) : p_(p) {}
  ~ProgramGuard() { nvrtcDestroyProgram(&p_); }
  ProgramGuard(const ProgramGuard&) = delete;
  ProgramGuard& operator=(const ProgramGuard&) = delete;

 private:
  nvrtcProgram p_;
};

void check_arch_supported(const NvrtcRequest& r) {
  int n = 0;
  RLX_NVRTC_CHECK(nvrtcGetNumSupportedArchs(&n));
  std::vector<int> archs(static_cast<size_t>(n));
  RLX_NVRTC_CHECK(nvrtcGetSupportedArchs(archs.data()));
  const int want = r.cc_major * 10 + r.cc_minor;
  if (std::find(archs.begin(), archs.end(), want) != archs.end()) return;
  std::string list;
  for (int a : archs) list += str(list.empty() ? "" : " ", "sm_", a);
  throw Unsupported(str("custom op '", r.op, "': NVRTC ", nvrtc_version(), " cannot compile for ", arch_of(r),
                        " (it supports ", list, ")"));
}

NvrtcBinary compile_now(const NvrtcRequest& r) {
  check_arch_supported(r);
  nvrtcProgram prog = nullptr;
  const std::string file = r.op + ".cu";
  RLX_NVRTC_CHECK(nvrtcCreateProgram(&prog, r.source.c_str(), file.c_str(), 0, nullptr, nullptr));
  ProgramGuard guard(prog);
  RLX_NVRTC_CHECK(nvrtcAddNameExpression(prog, r.entry.c_str()));
  std::vector<std::string> opts = {"--gpu-architecture=" + arch_of(r)};
  opts.insert(opts.end(), r.options.begin(), r.options.end());
  std::vector<const char*> copts;
  for (const auto& o : opts) copts.push_back(o.c_str());
  const nvrtcResult res = nvrtcCompileProgram(prog, static_cast<int>(copts.size()), copts.data());
  size_t log_size = 0;
  std::string log;
  if (nvrtcGetProgramLogSize(prog, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    log.resize(log_size);
    if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) log.clear();
    while (!log.empty() && (log.back() == '\0' || log.back() == '\n')) log.pop_back();
  }
  if (res != NVRTC_SUCCESS)
    throw InvalidArgument(str("custom op '", r.op, "': NVRTC could not compile kernel '", r.entry, "' for ",
                              arch_of(r), " (", nvrtcGetErrorString(res), "):\n", log));
  if (!log.empty()) log_verbose("NVRTC log for custom op '", r.op, "':\n", log);
  NvrtcBinary b;
  b.arch = arch_of(r);
  const char* lowered = nullptr;
  const nvrtcResult lr = nvrtcGetLoweredName(prog, r.entry.c_str(), &lowered);
  if (lr != NVRTC_SUCCESS || !lowered)
    throw InvalidArgument(str("custom op '", r.op, "': entry '", r.entry, "' names no __global__ function of the source (",
                              nvrtcGetErrorString(lr), ")"));
  b.lowered_name = lowered;
  size_t cubin_size = 0;
  RLX_NVRTC_CHECK(nvrtcGetCUBINSize(prog, &cubin_size));
  RLX_CHECK_AS(DeviceError, cubin_size > 0, "custom op '", r.op, "': NVRTC produced no cubin for ", arch_of(r));
  b.cubin.resize(cubin_size);
  RLX_NVRTC_CHECK(nvrtcGetCUBIN(prog, b.cubin.data()));
  ++stats().compiles;
  return b;
}

}  // namespace

std::string nvrtc_cache_path(const NvrtcRequest& req) {
  const fs::path dir = cache_dir();
  if (dir.empty()) return {};
  return (dir / (hex64(fnv1a(cache_key(req))) + ".cubin")).string();
}

NvrtcBinary nvrtc_compile(const NvrtcRequest& req, bool use_disk) {
  RLX_CHECK(!req.source.empty(), "custom op '", req.op, "': empty CUDA source");
  RLX_CHECK(!req.entry.empty(), "custom op '", req.op, "': no kernel entry name");
  const std::string path = use_disk ? nvrtc_cache_path(req) : std::string();
  const std::string key = path.empty() ? std::string() : cache_key(req);
  if (!path.empty()) {
    std::string data;
    if (read_file(path, data)) {
      NvrtcBinary b;
      std::string why;
      if (decode(data, key, b, why)) {
        b.arch = arch_of(req);
        b.from_disk = true;
        ++stats().disk_hits;
        log_verbose("NVRTC cache: custom op '", req.op, "' kernel '", req.entry, "' ", b.arch, " loaded from ", path);
        return b;
      }
      ++stats().disk_rejected;
      log_warn("NVRTC cache: ignoring ", path, " (", why, "); recompiling");
    }
  }
  NvrtcBinary b = compile_now(req);
  log_verbose("NVRTC: compiled custom op '", req.op, "' kernel '", req.entry, "' for ", b.arch, " (",
              b.cubin.size(), " bytes)", path.empty() ? "" : ", caching at ", path);
  if (!path.empty()) write_cache(path, encode(key, b));
  return b;
}

const void* nvrtc_kernel(const NvrtcRequest& req, int device) {
  // Loaded kernels live for the process: thunks of compiled programs hold them,
  // and unloading during static destruction would race the CUDA runtime's teardown.
  struct Loaded {
    cudaLibrary_t lib = nullptr;
    cudaKernel_t kernel = nullptr;
    std::set<int> devices;
  };
  static std::mutex mu;
  static std::map<std::string, Loaded> loaded;
  std::lock_guard lock(mu);
  const std::string key = cache_key(req);
  Loaded& l = loaded[key];
  if (!l.kernel) {
    NvrtcBinary b = nvrtc_compile(req);
    cudaError_t err = cudaLibraryLoadData(&l.lib, b.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    if (err != cudaSuccess && b.from_disk) {
      cudaGetLastError();
      log_warn("NVRTC cache: cached cubin for custom op '", req.op, "' does not load (", cudaGetErrorName(err),
               "); recompiling");
      b = nvrtc_compile(req, /*use_disk=*/false);
      err = cudaLibraryLoadData(&l.lib, b.cubin.data(), nullptr, nullptr, 0, nullptr, nullptr, 0);
    }
    if (err != cudaSuccess) {
      loaded.erase(key);
      throw_cuda_error(err, "cudaLibraryLoadData (custom op kernel)", __FILE__, __LINE__);
    }
    err = cudaLibraryGetKernel(&l.kernel, l.lib, b.lowered_name.c_str());
    if (err != cudaSuccess) {
      cudaGetLastError();
      cudaLibraryUnload(l.lib);
      loaded.erase(key);
      throw DeviceError(str("custom op '", req.op, "': kernel '", req.entry, "' (", b.lowered_name,
                            ") not found in its cubin: ", cudaGetErrorString(err)));
    }
  }
  if (!l.devices.count(device)) {
    // Querying attributes loads the module into this device's context now, at
    // program compile time, so the first launch cannot happen inside a capture.
    DeviceGuard guard(device);
    cudaFuncAttributes attrs{};
    RLX_CUDA_CHECK(cudaFuncGetAttributes(&attrs, reinterpret_cast<const void*>(l.kernel)));
    l.devices.insert(device);
  }
  return reinterpret_cast<const void*>(l.kernel);
}

NvrtcStats nvrtc_stats() {
  const Stats& s = stats();
  return NvrtcStats{s.compiles.load(), s.disk_hits.load(), s.disk_writes.load(), s.disk_rejected.load()};
}

}  // namespace rlx::cuda
