#include "les/cache/policy.h"

#include "les/cache/policy_impl.h"
#include "les/util/error.h"

namespace les::cache {

namespace {

struct Entry {
  const char* name;
  std::unique_ptr<EvictionPolicy> (*make)(const PolicyParams&);
};

const Entry kPolicies[] = {
    {"lru", make_lru},
    {"lfu", make_lfu},
    {"lrfu", make_lrfu},
    {"arc", make_arc},
    {"2q", make_2q},
    {"s3fifo", make_s3fifo},
    {"tinylfu", make_tinylfu},
    {"lpart", make_lpart},
};

}  // namespace

void require_capacity(const PolicyParams& p, const char* policy) {
  if (p.capacity == 0) throw Error(strfmt("cache policy '%s' needs PolicyParams::capacity > 0", policy));
}

const std::vector<std::string>& policy_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> v;
    for (const Entry& e : kPolicies) v.emplace_back(e.name);
    return v;
  }();
  return names;
}

std::unique_ptr<EvictionPolicy> make_policy(std::string_view name, const PolicyParams& p) {
  constexpr std::string_view kPred = "+pred";
  const bool pred = name.size() > kPred.size() && name.substr(name.size() - kPred.size()) == kPred;
  const std::string_view base = pred ? name.substr(0, name.size() - kPred.size()) : name;
  for (const Entry& e : kPolicies) {
    if (base == e.name) return pred ? make_predict_aware(e.make(p), p) : e.make(p);
  }
  std::string valid;
  for (const Entry& e : kPolicies) valid += (valid.empty() ? "" : ", ") + std::string(e.name);
  throw Error(strfmt("unknown cache policy '%.*s' (valid: %s; each also as <name>+pred)",
                     static_cast<int>(name.size()), name.data(), valid.c_str()));
}

}  // namespace les::cache
