// Helpers for the GGUF tests: a scratch directory, and running the python
// reference script tests/data/gen_gguf_fixtures.py (python from $RLX_PYTHON,
// else `python3`; tests that need it skip when it or the `gguf` package is missing).
#pragma once
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace rlx::test {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "rlx_gguf_XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline std::string python() {
  const char* p = std::getenv("RLX_PYTHON");
  return p && *p ? p : "python3";
}

inline std::string fixture_script() { return std::string(RLX_SOURCE_DIR) + "/tests/data/gen_gguf_fixtures.py"; }

inline std::string quoted(const std::string& s) { return "'" + s + "'"; }

struct CommandResult {
  int status = -1;
  std::string out;  // stdout only; stderr goes to the test log
};

inline CommandResult run_command(const std::string& cmd) {
  CommandResult r;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return r;
  std::array<char, 65536> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  r.status = pclose(p);
  return r;
}

// Runs the fixture script with `args`; fails the test (not skips) when it errors.
inline CommandResult run_fixture_script(const std::string& args) {
  CommandResult r = run_command(quoted(python()) + " " + quoted(fixture_script()) + " " + args);
  EXPECT_EQ(r.status, 0) << "gen_gguf_fixtures.py " << args << " failed";
  return r;
}

inline bool python_has_gguf() {
  static const bool ok =
      run_command(quoted(python()) + " -c 'import numpy, gguf' >/dev/null 2>&1").status == 0;
  return ok;
}

#define RLX_REQUIRE_PYTHON_GGUF()                                                             \
  do {                                                                                        \
    if (!::rlx::test::python_has_gguf())                                                      \
      GTEST_SKIP() << ::rlx::test::python()                                                   \
                   << " with numpy and the gguf package is not available (set RLX_PYTHON)"; \
  } while (0)

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

}  // namespace rlx::test
