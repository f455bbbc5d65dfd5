// Helpers shared by the subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"

namespace les::cli {

// "1,2, 3" -> {1,2,3}; throws les::Error on malformed input.
std::vector<int32_t> parse_token_list(const std::string& s);
// Applies --isa if given (throws if the CPU lacks it).
void apply_isa_flag(const Args& a);
// Writes bytes to path atomically (temp file, fsync, rename).
void write_file_atomic(const std::string& path, const void* data, size_t n);
std::string human_bytes(uint64_t b);

}  // namespace les::cli
