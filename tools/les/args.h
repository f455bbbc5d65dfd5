// Minimal command-line parsing in llama.cpp's conventions (-m FILE, --temp 0.8, --flag).
// Unknown flags, missing values and malformed numbers are errors naming the flag.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace les::cli {

struct FlagSpec {
  std::vector<std::string> names;  // e.g. {"-m", "--model"}
  bool takes_value = true;
  std::string help;
  std::string metavar = {};
};

class Args {
 public:
  Args(std::string command, std::string summary, std::vector<FlagSpec> flags);
  // Parses argv (without the program and subcommand). Throws les::Error on bad input.
  void parse(int argc, char** argv);
  bool help_requested() const { return help_; }
  std::string usage() const;

  bool has(const std::string& name) const;
  std::string str(const std::string& name, const std::string& def = "") const;
  std::string required(const std::string& name) const;
  int64_t i64(const std::string& name, int64_t def) const;
  double f64(const std::string& name, double def) const;
  const std::vector<std::string>& positional() const { return positional_; }
  std::vector<std::string> all(const std::string& name) const;

 private:
  const FlagSpec* find(const std::string& name) const;
  std::string canonical(const std::string& name) const;
  std::string command_, summary_;
  std::vector<FlagSpec> flags_;
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> positional_;
  bool help_ = false;
};

// Parses sizes like 512M, 3G, 1.5GiB, 4096 (bytes).
uint64_t parse_size(const std::string& s, const std::string& flag);

}  // namespace les::cli
