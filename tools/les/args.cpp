#include "args.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>

#include "les/util/error.h"

namespace les::cli {

Args::Args(std::string command, std::string summary, std::vector<FlagSpec> flags)
    : command_(std::move(command)), summary_(std::move(summary)), flags_(std::move(flags)) {}

const FlagSpec* Args::find(const std::string& name) const {
  for (const auto& f : flags_) {
    for (const auto& n : f.names) {
      if (n == name) return &f;
    }
  }
  return nullptr;
}

std::string Args::canonical(const std::string& name) const {
  const FlagSpec* f = find(name);
  return f ? f->names.back() : name;
}

void Args::parse(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      help_ = true;
      continue;
    }
    if (a.size() > 1 && a[0] == '-' && !(a.size() > 1 && (std::isdigit(static_cast<unsigned char>(a[1])) != 0))) {
      std::string value;
      bool inline_value = false;
      const size_t eq = a.find('=');
      if (a.rfind("--", 0) == 0 && eq != std::string::npos) {
        value = a.substr(eq + 1);
        a = a.substr(0, eq);
        inline_value = true;
      }
      const FlagSpec* f = find(a);
      if (!f) throw Error(strfmt("%s: unknown option '%s' (see les %s --help)", command_.c_str(), a.c_str(), command_.c_str()));
      if (f->takes_value) {
        if (!inline_value) {
          if (i + 1 >= argc) throw Error(strfmt("%s: option '%s' needs a value", command_.c_str(), a.c_str()));
          value = argv[++i];
        }
        values_.emplace(f->names.back(), value);
      } else {
        if (inline_value) throw Error(strfmt("%s: option '%s' takes no value", command_.c_str(), a.c_str()));
        values_.emplace(f->names.back(), "1");
      }
    } else {
      positional_.push_back(a);
    }
  }
}

std::string Args::usage() const {
  std::string s = "usage: les " + command_ + " [options]\n  " + summary_ + "\n\noptions:\n";
  for (const auto& f : flags_) {
    std::string names;
    for (size_t i = 0; i < f.names.size(); ++i) names += (i ? ", " : "") + f.names[i];
    if (f.takes_value) names += " " + (f.metavar.empty() ? std::string("N") : f.metavar);
    s += "  " + names;
    s += names.size() < 28 ? std::string(28 - names.size(), ' ') : std::string("\n") + std::string(30, ' ');
    s += f.help + "\n";
  }
  s += "  -h, --help                  show this help\n";
  return s;
}

bool Args::has(const std::string& name) const { return values_.count(canonical(name)) > 0; }

std::string Args::str(const std::string& name, const std::string& def) const {
  auto range = values_.equal_range(canonical(name));
  if (range.first == range.second) return def;
  auto last = range.first;
  for (auto it = range.first; it != range.second; ++it) last = it;
  return last->second;
}

std::vector<std::string> Args::all(const std::string& name) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(canonical(name));
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

std::string Args::required(const std::string& name) const {
  if (!has(name)) throw Error(strfmt("%s: missing required option %s (see les %s --help)", command_.c_str(), name.c_str(), command_.c_str()));
  return str(name);
}

int64_t Args::i64(const std::string& name, int64_t def) const {
  if (!has(name)) return def;
  const std::string v = str(name);
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end != '\0' || errno == ERANGE) {
    throw Error(strfmt("%s: option %s expects an integer, got '%s'", command_.c_str(), name.c_str(), v.c_str()));
  }
  return x;
}

double Args::f64(const std::string& name, double def) const {
  if (!has(name)) return def;
  const std::string v = str(name);
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !std::isfinite(x)) {
    throw Error(strfmt("%s: option %s expects a number, got '%s'", command_.c_str(), name.c_str(), v.c_str()));
  }
  return x;
}

uint64_t parse_size(const std::string& s, const std::string& flag) {
  char* end = nullptr;
  const double x = std::strtod(s.c_str(), &end);
  std::string unit = end ? end : "";
  for (auto& ch : unit) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  double mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KB" || unit == "KIB") mult = 1024.0;
  else if (unit == "M" || unit == "MB" || unit == "MIB") mult = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GIB") mult = 1024.0 * 1024 * 1024;
  else if (unit == "T" || unit == "TB" || unit == "TIB") mult = 1024.0 * 1024 * 1024 * 1024;
  else throw Error(strfmt("%s: cannot parse size '%s' (use e.g. 512M, 3G)", flag.c_str(), s.c_str()));
  if (s.empty() || end == s.c_str() || !(x >= 0) || !std::isfinite(x)) {
    throw Error(strfmt("%s: cannot parse size '%s' (use e.g. 512M, 3G)", flag.c_str(), s.c_str()));
  }
  return static_cast<uint64_t>(x * mult);
}

}  // namespace les::cli
