// The RLX_* knob table: parsing, error messages, and that the docs and the
// help text list every knob.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>

#include "rlx/core/env.h"
#include "rlx/core/error.h"
#include "tests/test_util.h"

namespace rlx {
namespace {

using test::ScopedEnv;

const EnvKnob* knob_of_type(EnvType t) {
  for (const auto& k : env_knobs())
    if (k.type == t) return &k;
  return nullptr;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return {};
}

TEST(Env, BoolForms) {
  const char* name = "RLX_VERBOSE";
  for (const char* v : {"1", "true", "TRUE", "True", "on", "ON", "yes", "Yes"}) {
    ScopedEnv e(name, v);
    EXPECT_TRUE(env_bool(name)) << v;
  }
  for (const char* v : {"0", "false", "FALSE", "off", "Off", "no", "NO", ""}) {
    ScopedEnv e(name, v);
    EXPECT_FALSE(env_bool(name)) << "'" << v << "'";
  }
}

TEST(Env, BoolDefaultWhenUnset) {
  ScopedEnv a("RLX_VERBOSE", nullptr);
  EXPECT_FALSE(env_bool("RLX_VERBOSE"));
  ScopedEnv b("RLX_CPU_BLAS", nullptr);
  EXPECT_TRUE(env_bool("RLX_CPU_BLAS"));  // default "1"
}

TEST(Env, MalformedBoolNamesTheKnob) {
  for (const char* v : {"2", "maybe", "truee", "1 ", "-1"}) {
    ScopedEnv e("RLX_IR_DUMP", v);
    EXPECT_THROW(env_bool("RLX_IR_DUMP"), InvalidArgument) << v;
    const std::string msg = message_of([] { (void)env_bool("RLX_IR_DUMP"); });
    EXPECT_NE(msg.find("RLX_IR_DUMP"), std::string::npos) << msg;
    EXPECT_NE(msg.find(v), std::string::npos) << msg;
  }
}

TEST(Env, Int) {
  const char* name = "RLX_NUM_THREADS";
  {
    ScopedEnv e(name, nullptr);
    EXPECT_EQ(env_int(name), 0);
  }
  {
    ScopedEnv e(name, "8");
    EXPECT_EQ(env_int(name), 8);
  }
  {
    ScopedEnv e(name, "-3");
    EXPECT_EQ(env_int(name), -3);
  }
  {
    ScopedEnv e(name, "9223372036854775807");
    EXPECT_EQ(env_int(name), INT64_MAX);
  }
}

TEST(Env, MalformedIntNamesTheKnob) {
  const char* name = "RLX_COMPILE_CACHE";
  for (const char* v : {"", "abc", "8x", "1.5", "0x10", "99999999999999999999"}) {
    ScopedEnv e(name, v);
    EXPECT_THROW(env_int(name), InvalidArgument) << "'" << v << "'";
    const std::string msg = message_of([&] { (void)env_int(name); });
    EXPECT_NE(msg.find(name), std::string::npos) << msg;
  }
}

TEST(Env, UndeclaredKnobFails) {
  ScopedEnv e("RLX_NOT_A_KNOB", "1");
  EXPECT_THROW(env_bool("RLX_NOT_A_KNOB"), Error);
  EXPECT_THROW(env_int("RLX_NOT_A_KNOB"), Error);
  EXPECT_THROW(env_string("RLX_NOT_A_KNOB"), Error);
}

TEST(Env, WrongTypeAccessFails) {
  EXPECT_THROW(env_int("RLX_VERBOSE"), Error);
  EXPECT_THROW(env_string("RLX_VERBOSE"), Error);
  EXPECT_THROW(env_bool("RLX_NUM_THREADS"), Error);
}

TEST(Env, StringKnobReadsRawValue) {
  const EnvKnob* k = knob_of_type(EnvType::String);
  if (!k) GTEST_SKIP() << "no string knob in the table";
  const std::string name(k->name);
  {
    ScopedEnv e(name.c_str(), nullptr);
    EXPECT_EQ(env_string(name), std::string(k->default_value));
  }
  ScopedEnv e(name.c_str(), "some value");
  EXPECT_EQ(env_string(name), "some value");
}

TEST(Env, TableIsWellFormed) {
  const std::regex name_re("RLX_[A-Z0-9_]+");
  std::set<std::string_view> names;
  for (const auto& k : env_knobs()) {
    EXPECT_TRUE(std::regex_match(std::string(k.name), name_re)) << k.name;
    EXPECT_TRUE(names.insert(k.name).second) << "duplicate knob " << k.name;
    EXPECT_FALSE(k.help.empty()) << k.name;
    EXPECT_EQ(k.help.find('\n'), std::string_view::npos) << k.name << ": help must be one line";
  }
}

TEST(Env, EveryDefaultParses) {
  for (const auto& k : env_knobs()) {
    const std::string name(k.name);
    ScopedEnv e(name.c_str(), nullptr);
    switch (k.type) {
      case EnvType::Bool: EXPECT_NO_THROW((void)env_bool(name)) << name; break;
      case EnvType::Int: EXPECT_NO_THROW((void)env_int(name)) << name; break;
      case EnvType::String: EXPECT_NO_THROW((void)env_string(name)) << name; break;
    }
  }
}

TEST(Env, HelpTextListsEveryKnob) {
  const std::string help = env_help_text();
  for (const auto& k : env_knobs()) {
    EXPECT_NE(help.find(std::string(k.name)), std::string::npos) << k.name;
    EXPECT_NE(help.find(std::string(k.help)), std::string::npos) << k.name;
  }
}

std::string read_env_doc() {
  const std::string path = std::string(RLX_SOURCE_DIR) + "/docs/env.md";
  std::ifstream f(path);
  EXPECT_TRUE(f.is_open()) << "cannot open " << path;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(Env, DocsListEveryKnob) {
  const std::string doc = read_env_doc();
  for (const auto& k : env_knobs())
    EXPECT_NE(doc.find(str("`", k.name, "`")), std::string::npos)
        << k.name << " is missing from docs/env.md; run scripts/gen_env_doc.sh";
}

TEST(Env, DocsListNoUnknownKnob) {
  const std::string doc = read_env_doc();
  std::set<std::string> known;
  for (const auto& k : env_knobs()) known.emplace(k.name);
  const std::regex row("\\| `(RLX_[A-Z0-9_]+)` \\|");
  for (auto it = std::sregex_iterator(doc.begin(), doc.end(), row); it != std::sregex_iterator(); ++it)
    EXPECT_TRUE(known.count((*it)[1].str())) << (*it)[1].str() << " is in docs/env.md but not in the env table";
}

// Library and CLI code read knobs only through env.h, and only declared ones
// (an undeclared name would otherwise fail only when that line runs).
TEST(Env, SourcesUseOnlyDeclaredKnobs) {
  namespace fs = std::filesystem;
  std::set<std::string> known;
  for (const auto& k : env_knobs()) known.emplace(k.name);
  const std::regex use(R"re(env_(bool|int|string)\("(RLX_[A-Z0-9_]+)"\))re");
  const std::regex raw(R"re(getenv\(\s*"RLX_)re");
  int files = 0;
  for (const char* dir : {"rlx", "cli"}) {
    for (const auto& e : fs::recursive_directory_iterator(fs::path(RLX_SOURCE_DIR) / dir)) {
      const auto ext = e.path().extension().string();
      if (!e.is_regular_file() || (ext != ".h" && ext != ".cpp" && ext != ".cu" && ext != ".cuh")) continue;
      std::ifstream f(e.path());
      std::stringstream ss;
      ss << f.rdbuf();
      const std::string text = ss.str();
      ++files;
      for (auto it = std::sregex_iterator(text.begin(), text.end(), use); it != std::sregex_iterator(); ++it)
        EXPECT_TRUE(known.count((*it)[2].str())) << e.path() << " reads undeclared knob " << (*it)[2].str();
      if (e.path().filename() != "env.cpp") {
        EXPECT_FALSE(std::regex_search(text, raw)) << e.path() << " calls getenv(\"RLX_...\"); use rlx/core/env.h";
      }
    }
  }
  EXPECT_GT(files, 10);
}

}  // namespace
}  // namespace rlx
