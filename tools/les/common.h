// Helpers shared by the subcommands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "args.h"
#include "les/util/atomic_file.h"  // write_file_atomic

namespace les::cli {

// "1,2, 3" -> {1,2,3}; throws les::Error on malformed input.
std::vector<int32_t> parse_token_list(const std::string& s);
// Applies --isa if given (throws if the CPU lacks it).
void apply_isa_flag(const Args& a);
std::string human_bytes(uint64_t b);

}  // namespace les::cli

namespace les {
class Engine;
}

namespace les::cli {

// "les: memory: <the choice and why>" on stderr, then the budget's split when experts stream, or
// how the resident model was loaded.
void print_memory_choice(const Engine& engine);

}  // namespace les::cli
