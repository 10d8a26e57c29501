// Every RLX_* environment knob is declared once, in env.cpp's table, with its
// type, default and one line of help; code reads knobs only through these
// accessors, which reject names missing from the table. `rlx --help-env`
// and docs/env.md print the same table.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlx {

enum class EnvType { Bool, Int, String };

struct EnvKnob {
  std::string_view name;
  EnvType type;
  std::string_view default_value;
  std::string_view help;
};

const std::vector<EnvKnob>& env_knobs();

// Values are read from the environment on every call (cheap; callers on hot
// paths cache the result). Malformed values throw InvalidArgument naming the knob.
bool env_bool(std::string_view name);
int64_t env_int(std::string_view name);
std::string env_string(std::string_view name);

// The table as aligned text, for `rlx --help-env`.
std::string env_help_text();

}  // namespace rlx
