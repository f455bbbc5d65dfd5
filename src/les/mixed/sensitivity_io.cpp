#include <nlohmann/json.hpp>

#include "les/mixed/sensitivity.h"
#include "les/util/error.h"
#include "les/util/hash.h"

namespace les::mixed {

uint64_t tensor_fingerprint(const gguf::File& model) {
  std::string s;
  for (const auto& t : model.tensors) {
    s += t.name;
    s += ':';
    s += type_name(t.type);
    for (int64_t d : t.ne) s += ',' + std::to_string(d);
    s += ';';
  }
  return hash64(s.data(), s.size());
}

std::string sensitivity_to_json(const SensitivityReport& r, const gguf::File& model, const std::string& note) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["model_fingerprint"] = hex64(tensor_fingerprint(model));
  j["note"] = note;
  j["calib_tokens"] = r.n_tokens;
  j["measurements"] = r.n_measurements;
  j["seconds"] = r.seconds;
  nlohmann::ordered_json groups = nlohmann::ordered_json::array();
  for (const GroupSensitivity& gs : r.groups) {
    nlohmann::ordered_json g;
    g["group"] = gs.group.id();
    nlohmann::ordered_json cs = nlohmann::ordered_json::array();
    for (const CandidateResult& c : gs.candidates) {
      cs.push_back({{"type", type_name(c.type)}, {"keep", c.keep}, {"bytes", c.bytes}, {"rel_error", c.rel_error},
                    {"dkld", c.dkld}, {"measured", c.measured}});
    }
    g["candidates"] = cs;
    groups.push_back(g);
  }
  j["groups"] = groups;
  return j.dump(1);
}

SensitivityReport sensitivity_from_json(const std::string& json, const gguf::File& model, const std::string& what) {
  SensitivityReport r;
  const std::vector<TensorGroup> groups = tensor_groups(model);
  try {
    const nlohmann::json j = nlohmann::json::parse(json);
    if (j.at("version").get<int>() != 1) throw Error(strfmt("%s: unsupported sensitivity version", what.c_str()));
    if (j.at("model_fingerprint").get<std::string>() != hex64(tensor_fingerprint(model))) {
      throw Error(strfmt("%s was measured on another model (its tensors' names, shapes or types differ)", what.c_str()));
    }
    r.n_tokens = j.at("calib_tokens").get<int>();
    r.n_measurements = j.at("measurements").get<int>();
    r.seconds = j.at("seconds").get<double>();
    const auto& gj = j.at("groups");
    if (gj.size() != groups.size()) {
      throw Error(strfmt("%s has %zu groups, the model %zu", what.c_str(), gj.size(), groups.size()));
    }
    for (size_t i = 0; i < groups.size(); ++i) {
      const auto& g = gj[i];
      if (g.at("group").get<std::string>() != groups[i].id()) {
        throw Error(strfmt("%s: group %zu is %s, the model's is %s", what.c_str(), i,
                           g.at("group").get<std::string>().c_str(), groups[i].id().c_str()));
      }
      GroupSensitivity gs;
      gs.group = groups[i];
      for (const auto& c : g.at("candidates")) {
        CandidateResult cr;
        const auto t = parse_type(c.at("type").get<std::string>());
        if (!t) throw Error(strfmt("%s: group %s: unknown type", what.c_str(), groups[i].id().c_str()));
        cr.type = *t;
        cr.keep = c.at("keep").get<bool>();
        cr.bytes = c.at("bytes").get<uint64_t>();
        if (cr.bytes != (cr.keep ? groups[i].src_bytes() : groups[i].bytes(cr.type))) {
          throw Error(strfmt("%s: group %s as %s: %llu bytes recorded, the model's are %llu", what.c_str(),
                             groups[i].id().c_str(), type_name(cr.type), static_cast<unsigned long long>(cr.bytes),
                             static_cast<unsigned long long>(cr.keep ? groups[i].src_bytes() : groups[i].bytes(cr.type))));
        }
        cr.rel_error = c.at("rel_error").get<double>();
        cr.dkld = c.at("dkld").get<double>();
        cr.measured = c.at("measured").get<bool>();
        gs.candidates.push_back(cr);
      }
      if (gs.candidates.empty()) throw Error(strfmt("%s: group %s has no candidates", what.c_str(), groups[i].id().c_str()));
      r.groups.push_back(std::move(gs));
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(strfmt("%s: malformed sensitivity file: %s", what.c_str(), e.what()));
  }
  return r;
}

}  // namespace les::mixed
