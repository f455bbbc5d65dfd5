#include "les/mixed/mixed_plan.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "les/mixed/allocate.h"
#include "les/mixed/stream_cost.h"
#include "les/pack/pack_format.h"
#include "les/util/error.h"

namespace les::mixed {

double MixedRecipe::total_bpw() const {
  return n_weights > 0 ? 8.0 * static_cast<double>(predicted_bytes - fixed_bytes) / static_cast<double>(n_weights) : 0;
}

namespace {


// Bytes of recipe metadata for n groups (an upper estimate of the JSON written for them).
uint64_t recipe_bytes_estimate(size_t n_groups) { return 512 + 128 * static_cast<uint64_t>(n_groups); }

}  // namespace

MixedRecipe plan_mixed(const std::string& in_path, const MixedOptions& opt, const SensitivityProgress& progress) {
  const gguf::File f = gguf::read_file(in_path);
  if (pack::is_packed(f)) {
    throw Error(strfmt("%s is a packed file (les pack): quantize the original GGUF, then pack the result",
                       in_path.c_str()));
  }
  const std::vector<TensorGroup> groups = tensor_groups(f);
  MixedRecipe r;
  std::set<std::string> in_group;
  for (const TensorGroup& g : groups) {
    for (const auto& t : g.tensors) in_group.insert(t.name);
  }
  uint64_t other = 0;
  for (const auto& t : f.tensors) {
    r.n_weights += static_cast<uint64_t>(t.n_elements());
    if (!in_group.count(t.name)) other += t.n_bytes;
  }
  // Everything but the groups' tensor bytes: header (with the recipe), the other tensors, and
  // alignment padding (at most alignment - 1 bytes per tensor).
  r.fixed_bytes = f.data_offset + recipe_bytes_estimate(groups.size()) + other + f.tensors.size() * f.alignment;
  if (opt.target_bytes > 0) {
    r.target_bytes = opt.target_bytes;
  } else if (opt.target_bpw > 0) {
    r.target_bytes = static_cast<uint64_t>(opt.target_bpw * static_cast<double>(r.n_weights) / 8.0) +
                     (r.fixed_bytes - other);
  } else {
    throw Error("a mixed-precision target needs a size or a bits-per-weight target");
  }
  if (f.file_size <= r.target_bytes) {
    throw Error(strfmt("%s is already %llu bytes, not above the target of %llu bytes: it is quantized below the target "
                       "(start from a higher-precision file)", in_path.c_str(),
                       static_cast<unsigned long long>(f.file_size), static_cast<unsigned long long>(r.target_bytes)));
  }
  if (r.target_bytes <= r.fixed_bytes) {
    throw Error(strfmt("the target of %llu bytes is below the %llu bytes that are not quantized (header, norms, "
                       "routers)", static_cast<unsigned long long>(r.target_bytes),
                       static_cast<unsigned long long>(r.fixed_bytes)));
  }
  // Types whose quantizers need an importance matrix are no candidates without one.
  const bool with_importance = static_cast<bool>(opt.importance);
  auto usable = [&](Type t) { return with_importance || !quantizer_needs_importance(t); };
  if (!with_importance) {
    for (Type t : weight_types()) {
      if (!quantizer_needs_importance(t)) continue;
      if (opt.sensitivity.candidates.empty() ||
          std::find(opt.sensitivity.candidates.begin(), opt.sensitivity.candidates.end(), t) !=
              opt.sensitivity.candidates.end()) {
        r.excluded_types.push_back(t);
      }
    }
  }
  // The cheapest allocation, checked before the (long) measurement.
  {
    uint64_t min_bytes = r.fixed_bytes;
    for (const TensorGroup& g : groups) {
      uint64_t m = g.src_bytes();
      for (Type t : weight_types()) {
        if (g.fits(t) && usable(t) && (opt.sensitivity.candidates.empty() ||
                          std::find(opt.sensitivity.candidates.begin(), opt.sensitivity.candidates.end(), t) !=
                              opt.sensitivity.candidates.end())) {
          m = std::min(m, g.bytes(t));
        }
      }
      min_bytes += m;
    }
    if (r.target_bytes < min_bytes) {
      throw Error(strfmt("the target of %llu bytes is below the smallest file the candidate types allow (%llu bytes, "
                         "every group at its smallest type)", static_cast<unsigned long long>(r.target_bytes),
                         static_cast<unsigned long long>(min_bytes)));
    }
  }
  std::unique_ptr<Model> model = Model::load(in_path);
  // Streaming cost model: prices per group from the routing of the calibration text.
  StreamPrices prices;
  const bool stream = opt.mem_budget > 0;
  uint64_t group_elements = 0;
  for (const TensorGroup& g : groups) group_elements += g.n_elements();
  const double ref_bpw = 8.0 * static_cast<double>(r.target_bytes - r.fixed_bytes) / static_cast<double>(group_elements);
  if (stream) {
    const int n_calib = static_cast<int>(opt.calib_tokens.size());
    const int window = std::max(1, std::min({opt.route_window, opt.route_tokens, n_calib}));
    const int windows = std::max(1, std::min(opt.route_tokens, n_calib) / window);
    prices = stream_prices(*model, groups, opt.calib_tokens, window, windows, opt.sensitivity.n_threads,
                           opt.mem_budget, ref_bpw);
    r.cost_model = "stream";
  }
  const int n_expert = model->config().n_expert, top_k = model->config().n_expert_used;
  auto cost_of = [&](const TensorGroup& g, uint64_t bytes) {
    return stream ? prices.cost(g, bytes, n_expert, top_k) : static_cast<double>(bytes);
  };

  const SensitivityReport rep = opt.measured ? *opt.measured
                                             : measure_sensitivity(*model, opt.calib_tokens, groups, opt.importance,
                                                                   opt.sensitivity, progress);
  if (opt.report_out) *opt.report_out = rep;

  std::vector<AllocItem> items;
  std::vector<std::vector<size_t>> option_of(rep.groups.size());  // item option -> candidate index
  double budget = 0;
  for (size_t i = 0; i < rep.groups.size(); ++i) {
    const GroupSensitivity& gs = rep.groups[i];
    AllocItem it;
    it.id = gs.group.id();
    for (size_t k = 0; k < gs.candidates.size(); ++k) {
      const CandidateResult& c = gs.candidates[k];
      // A saved sensitivity (--sensitivity) may have been measured with an importance matrix.
      if (!c.keep && !usable(c.type)) continue;
      it.options.push_back(AllocOption{cost_of(gs.group, c.bytes), c.dkld});
      option_of[i].push_back(k);
    }
    items.push_back(std::move(it));
    budget += cost_of(gs.group, static_cast<uint64_t>(static_cast<double>(gs.group.n_elements()) * ref_bpw / 8.0));
  }
  if (!stream) budget = static_cast<double>(r.target_bytes - r.fixed_bytes);
  const AllocResult a = allocate(items, budget);
  for (size_t i = 0; i < rep.groups.size(); ++i) {
    const GroupSensitivity& gs = rep.groups[i];
    const CandidateResult& c = gs.candidates[option_of[i][static_cast<size_t>(a.choice[i])]];
    RecipeEntry e;
    e.group = gs.group.id();
    e.layer = gs.group.layer;
    e.kind = gs.group.kind;
    e.type = c.type;
    e.keep = c.keep;
    e.bytes = c.bytes;
    e.dkld = c.dkld;
    if (stream && gs.group.routed_experts) e.miss_rate = prices.miss_rate[static_cast<size_t>(gs.group.layer)];
    r.entries.push_back(e);
    r.predicted_bytes += c.bytes;
  }
  r.predicted_kld = a.dkld;
  r.predicted_bytes += r.fixed_bytes;
  if (stream) {
    r.stream_bytes_per_token = a.cost;
    r.stream_bytes_per_token_ref = budget;
  }
  r.calib_tokens = rep.n_tokens;
  r.measurements = rep.n_measurements;
  r.seconds = rep.seconds;
  r.imatrix = opt.imatrix_name;
  return r;
}

QuantizePlan plan_from_recipe(const MixedRecipe& r, const gguf::File& in, int n_threads) {
  QuantizePlan p;
  p.recipe = Recipe::pure;
  p.n_threads = n_threads;
  p.keep_unlisted = true;  // tensors in no group (norms, ...) and kept groups stay as they are
  std::map<std::string, const RecipeEntry*> by_id;
  for (const RecipeEntry& e : r.entries) by_id[e.group] = &e;
  for (const TensorGroup& g : tensor_groups(in)) {
    auto it = by_id.find(g.id());
    if (it == by_id.end()) throw Error(strfmt("the recipe has no entry for group %s", g.id().c_str()));
    if (it->second->keep) continue;
    for (const GroupTensor& t : g.tensors) p.overrides[t.name] = it->second->type;
  }
  p.extra_kv.emplace_back(kRecipeKey, gguf::Value{});
  p.extra_kv.back().second.type = gguf::ValueType::STRING;
  p.extra_kv.back().second.str = recipe_to_json(r);
  return p;
}

std::string recipe_to_json(const MixedRecipe& r) {
  nlohmann::ordered_json j;
  j["version"] = 1;
  j["cost_model"] = r.cost_model;
  j["target_bytes"] = r.target_bytes;
  j["predicted_bytes"] = r.predicted_bytes;
  j["predicted_kld"] = r.predicted_kld;
  j["calib_tokens"] = r.calib_tokens;
  j["measurements"] = r.measurements;
  j["imatrix"] = r.imatrix;
  if (r.cost_model == "stream") {
    j["stream_bytes_per_token"] = r.stream_bytes_per_token;
    j["stream_bytes_per_token_ref"] = r.stream_bytes_per_token_ref;
  }
  nlohmann::ordered_json g = nlohmann::ordered_json::array();
  for (const RecipeEntry& e : r.entries) {
    nlohmann::ordered_json x;
    x["group"] = e.group;
    x["type"] = e.keep ? "keep" : type_name(e.type);
    x["src"] = type_name(e.type);
    x["bytes"] = e.bytes;
    x["dkld"] = e.dkld;
    if (r.cost_model == "stream") x["miss_rate"] = e.miss_rate;
    g.push_back(x);
  }
  j["groups"] = g;
  return j.dump();
}

MixedRecipe recipe_from_gguf(const gguf::File& f) {
  const gguf::Value* v = f.find(kRecipeKey);
  if (!v) throw Error(strfmt("the file has no mixed-precision recipe (key %s)", kRecipeKey));
  MixedRecipe r;
  try {
    const nlohmann::json j = nlohmann::json::parse(v->as_string(kRecipeKey));
    if (j.at("version").get<int>() != 1) throw Error(strfmt("%s: unsupported recipe version", kRecipeKey));
    r.cost_model = j.at("cost_model").get<std::string>();
    r.target_bytes = j.at("target_bytes").get<uint64_t>();
    r.predicted_bytes = j.at("predicted_bytes").get<uint64_t>();
    r.predicted_kld = j.at("predicted_kld").get<double>();
    r.calib_tokens = j.at("calib_tokens").get<int>();
    r.measurements = j.at("measurements").get<int>();
    r.imatrix = j.at("imatrix").get<std::string>();
    if (j.contains("stream_bytes_per_token")) r.stream_bytes_per_token = j.at("stream_bytes_per_token").get<double>();
    if (j.contains("stream_bytes_per_token_ref")) {
      r.stream_bytes_per_token_ref = j.at("stream_bytes_per_token_ref").get<double>();
    }
    for (const auto& x : j.at("groups")) {
      RecipeEntry e;
      e.group = x.at("group").get<std::string>();
      const std::string ts = x.at("type").get<std::string>();
      e.keep = ts == "keep";
      const auto t = parse_type(e.keep ? x.at("src").get<std::string>() : ts);
      if (!t) throw Error(strfmt("%s: group %s has unknown type '%s'", kRecipeKey, e.group.c_str(), ts.c_str()));
      e.type = *t;
      e.bytes = x.at("bytes").get<uint64_t>();
      e.dkld = x.at("dkld").get<double>();
      if (x.contains("miss_rate")) e.miss_rate = x.at("miss_rate").get<double>();
      if (e.group.rfind("blk.", 0) == 0) {
        const size_t dot = e.group.find('.', 4);
        e.layer = std::atoi(e.group.substr(4, dot - 4).c_str());
        e.kind = e.group.substr(dot + 1);
      } else {
        e.kind = e.group;
      }
      r.entries.push_back(e);
    }
  } catch (const nlohmann::json::exception& e) {
    throw Error(strfmt("%s: malformed recipe: %s", kRecipeKey, e.what()));
  }
  return r;
}

std::string format_recipe(const MixedRecipe& r) {
  std::string s;
  char line[256];
  std::snprintf(line, sizeof line, "%-24s %-8s %12s %12s\n", "group", "type", "bytes", "pred. dKLD");
  s += line;
  for (const RecipeEntry& e : r.entries) {
    std::snprintf(line, sizeof line, "%-24s %-8s %12llu %12.3e\n", e.group.c_str(),
                  e.keep ? (std::string(type_name(e.type)) + "*").c_str() : type_name(e.type),
                  static_cast<unsigned long long>(e.bytes), e.dkld);
    s += line;
  }
  std::snprintf(line, sizeof line, "%-24s %-8s %12llu %12.3e   (* = source kept; file %.2f MiB, %.3f bpw)\n",
                "total", "", static_cast<unsigned long long>(r.predicted_bytes), r.predicted_kld,
                static_cast<double>(r.predicted_bytes) / (1 << 20), r.total_bpw());
  s += line;
  if (!r.excluded_types.empty()) {
    s += "not candidates without an importance matrix (--imatrix):";
    for (Type t : r.excluded_types) s += std::string(" ") + type_name(t);
    s += "\n";
  }
  // Layer x kind grid.
  std::vector<std::string> kinds;
  int n_layer = 0;
  for (const RecipeEntry& e : r.entries) {
    if (e.layer < 0) continue;
    n_layer = std::max(n_layer, e.layer + 1);
    if (std::find(kinds.begin(), kinds.end(), e.kind) == kinds.end()) kinds.push_back(e.kind);
  }
  if (n_layer > 0) {
    s += "\nlayer";
    for (const auto& k : kinds) {
      std::snprintf(line, sizeof line, " %11s", k.c_str());
      s += line;
    }
    const bool stream = r.cost_model == "stream";
    if (stream) s += "  expert miss rate";
    s += "\n";
    std::map<std::pair<int, std::string>, const RecipeEntry*> at;
    std::map<int, double> miss;
    for (const RecipeEntry& e : r.entries) {
      if (e.miss_rate > 0) miss[e.layer] = e.miss_rate;
    }
    for (const RecipeEntry& e : r.entries) at[{e.layer, e.kind}] = &e;
    for (int l = 0; l < n_layer; ++l) {
      std::snprintf(line, sizeof line, "%5d", l);
      s += line;
      for (const auto& k : kinds) {
        auto it = at.find({l, k});
        std::snprintf(line, sizeof line, " %11s",
                      it == at.end() ? "-" : it->second->keep ? (std::string(type_name(it->second->type)) + "*").c_str()
                                                              : type_name(it->second->type));
        s += line;
      }
      if (stream && miss.count(l)) {
        std::snprintf(line, sizeof line, "  %16.3f", miss[l]);
        s += line;
      }
      s += "\n";
    }
    for (const RecipeEntry& e : r.entries) {
      if (e.layer >= 0) continue;
      s += e.kind + ": " + (e.keep ? std::string(type_name(e.type)) + "*" : type_name(e.type)) + "\n";
    }
  }
  return s;
}

}  // namespace les::mixed
