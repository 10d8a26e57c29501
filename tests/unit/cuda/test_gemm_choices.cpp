// GemmEngine's timed choices on disk (gemm_choices.h): the JSON round trip,
// identity and schema checks, two processes' choices merged, and files that
// cannot be read or written. Host code: runs on the CPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "rlx/backends/cuda/gemm_choices.h"

using namespace rlx;
using namespace rlx::cuda;
namespace fs = std::filesystem;

namespace {

CalibrationIdentity identity() {
  CalibrationIdentity id;
  id.gpu_name = "NVIDIA H200";
  id.gpu_uuid = "GPU-1234";
  id.driver = "13.0";
  id.cuda_runtime = "13.0";
  id.cublaslt = "130100";
  id.rlx = rlx_version();
  return id;
}

GemmChoices some_choices() {
  GemmChoices c;
  c.algos["1,32768,1536,384,a"] = {31, 4, 0, 1, 17};
  c.algos["1,8192,384,1536,b"] = {6, 2, 1};
  c.sm90["2,32768,1536,384,gelu"] = "ping-pong";
  c.sm90["2,4096,384,384,none"] = "cublaslt";
  return c;
}

fs::path temp_dir(const std::string& tag) {
  const fs::path d = fs::temp_directory_path() / ("rlx_gemm_choices_" + tag + "_" + std::to_string(::getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string slurp(const fs::path& p) {
  std::ifstream f(p);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(GemmChoices, JsonRoundTrip) {
  const GemmChoices c = some_choices();
  std::string why;
  const auto back = gemm_choices_from_json(gemm_choices_to_json(identity(), c), identity(), &why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(*back, c);
}

TEST(GemmChoices, AnotherSetupOrSchemaOrMalformedTextIsRefusedWithItsReason) {
  const std::string text = gemm_choices_to_json(identity(), some_choices());
  CalibrationIdentity other = identity();
  other.cublaslt = "130200";
  std::string why;
  EXPECT_FALSE(gemm_choices_from_json(text, other, &why).has_value());
  EXPECT_NE(why.find("cublaslt"), std::string::npos) << why;

  std::string old = text;
  old.replace(old.find("\"schema_version\": 1"), 19, "\"schema_version\": 0");
  EXPECT_FALSE(gemm_choices_from_json(old, identity(), &why).has_value());
  EXPECT_NE(why.find("schema_version"), std::string::npos) << why;

  for (const std::string& bad : {std::string("{"), std::string("[]"), text.substr(0, text.size() / 2),
                                std::string(R"({"schema_version": 1})")}) {
    why.clear();
    EXPECT_FALSE(gemm_choices_from_json(bad, identity(), &why).has_value()) << bad;
    EXPECT_FALSE(why.empty()) << bad;
  }
  std::string wrong_type = text;
  wrong_type.replace(wrong_type.find("\"ping-pong\""), 11, "42");
  EXPECT_FALSE(gemm_choices_from_json(wrong_type, identity(), &why).has_value());
}

TEST(GemmChoices, FileKeepsChoicesForTheNextProcessAndMergesTwoWriters) {
  const fs::path dir = temp_dir("file");
  const std::string path = (dir / "cuda-gemm-GPU-1234.json").string();
  {
    GemmChoiceFile first(path, identity());
    EXPECT_TRUE(first.choices().algos.empty());
    GemmChoiceFile second(path, identity());  // another process, started before the first wrote
    first.record_algo("shape-a", {1, 2, 3});
    first.record_sm90("shape-s", "classic");
    second.record_algo("shape-b", {4});  // must not drop the first's choices
  }
  const GemmChoiceFile later(path, identity());
  EXPECT_EQ(later.choices().algos.at("shape-a"), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(later.choices().algos.at("shape-b"), (std::vector<int64_t>{4}));
  EXPECT_EQ(later.choices().sm90.at("shape-s"), "classic");

  // Another cuBLASLt: nothing is used, and the next write replaces the file.
  CalibrationIdentity other = identity();
  other.cublaslt = "130200";
  GemmChoiceFile upgraded(path, other);
  EXPECT_TRUE(upgraded.choices().algos.empty());
  upgraded.record_algo("shape-c", {9});
  const GemmChoiceFile after(path, other);
  EXPECT_EQ(after.choices().algos.size(), 1u);
  EXPECT_EQ(after.choices().algos.count("shape-c"), 1u);
  fs::remove_all(dir);
}

TEST(GemmChoices, CorruptFileIsIgnoredAndRewritten) {
  const fs::path dir = temp_dir("corrupt");
  const fs::path path = dir / "cuda-gemm-GPU-1234.json";
  std::ofstream(path) << "{\"schema_version\": 1, \"algos\": ";
  GemmChoiceFile f(path.string(), identity());
  EXPECT_TRUE(f.choices().algos.empty());
  f.record_sm90("shape", "cublaslt");
  std::string why;
  const auto back = gemm_choices_from_json(slurp(path), identity(), &why);
  ASSERT_TRUE(back.has_value()) << why;
  EXPECT_EQ(back->sm90.at("shape"), "cublaslt");
  fs::remove_all(dir);
}

TEST(GemmChoices, UnwritableFolderKeepsChoicesInMemory) {
  const fs::path dir = temp_dir("unwritable");
  const fs::path blocker = dir / "not-a-folder";
  std::ofstream(blocker) << "x";  // a file where the cache folder would go
  GemmChoiceFile f((blocker / "cuda-gemm-GPU-1234.json").string(), identity());
  EXPECT_NO_THROW(f.record_algo("shape", {5}));
  EXPECT_NO_THROW(f.record_algo("shape2", {6}));
  EXPECT_EQ(f.choices().algos.size(), 2u);
  fs::remove_all(dir);
}

TEST(GemmChoices, PathIsBesideTheCalibration) {
  const std::string p = gemm_choices_path("GPU-ab/cd");
  EXPECT_EQ(fs::path(p).filename().string(), "cuda-gemm-GPU-ab_cd.json");
  EXPECT_EQ(fs::path(p).parent_path(), fs::path(calibration_path("GPU-ab/cd")).parent_path());
}
