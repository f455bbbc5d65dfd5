// Matching an importance matrix against a model: shapes by tensor name, legacy entries split per
// expert, and the check that the matrix was made for this model.

#include "les/imatrix/imatrix.h"
#include "les/model/config.h"
#include "les/model/product_names.h"
#include "les/pack/pack_format.h"
#include "les/util/error.h"

namespace les {

namespace {

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

// Input width and matrix count of a weight tensor: ne[0] and the expert count of a 3-D stack.
int64_t n_in_of(const std::vector<int64_t>& ne) { return ne.empty() ? 0 : ne[0]; }
int64_t n_mat_of(const std::vector<int64_t>& ne) { return ne.size() >= 3 ? ne[2] : 1; }

}  // namespace

std::map<std::string, std::vector<int64_t>> model_tensor_shapes(const gguf::File& model) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const gguf::TensorInfo& t : model.tensors) {
    if (!pack::is_packed_tensor_name(t.name)) shapes[t.name] = t.ne;
  }
  if (pack::is_packed(model)) {
    const pack::PackInfo info = pack::read_pack_info(model, "model");
    for (const pack::PackedLayer& pl : info.layers) {
      for (const pack::PackedPart& pp : pl.parts) shapes[pp.tensor] = pp.ne;
    }
  }
  return shapes;
}

void fit_imatrix_to_model(ImportanceMatrix& m, const gguf::File& model) {
  const auto shapes = model_tensor_shapes(model);
  for (auto& [name, e] : m.entries) {
    const auto it = shapes.find(name);
    if (it == shapes.end() || e.n_mat != 1) continue;
    const int64_t n_in = n_in_of(it->second), n_mat = n_mat_of(it->second);
    if (n_mat > 1 && e.n_in == n_in * n_mat) {
      e.n_in = n_in;
      e.n_mat = n_mat;
      e.counts.assign(static_cast<size_t>(n_mat), e.counts[0]);
    }
  }
}

void check_imatrix_matches(const ImportanceMatrix& m, const gguf::File& model) {
  const auto shapes = model_tensor_shapes(model);
  const std::string arch = model.get_string("general.architecture", "?");
  for (const auto& [name, e] : m.entries) {
    const auto it = shapes.find(name);
    if (it == shapes.end()) {
      throw Error(strfmt("imatrix entry '%s' names a tensor this %s model does not have (made for another model?)",
                         name.c_str(), arch.c_str()));
    }
    const int64_t n_in = n_in_of(it->second), n_mat = n_mat_of(it->second);
    const bool same = e.n_in == n_in && e.n_mat == n_mat;
    const bool flat = e.n_mat == 1 && e.n_in == n_in * n_mat;
    if (!same && !flat) {
      throw Error(strfmt("imatrix entry '%s' is %lld matrices of %lld input columns, but the model's tensor has shape "
                         "%s (%lld of %lld): made for another model?", name.c_str(), static_cast<long long>(e.n_mat),
                         static_cast<long long>(e.n_in), shape_str(it->second).c_str(),
                         static_cast<long long>(n_mat), static_cast<long long>(n_in)));
    }
  }
  // Every product llama-imatrix collects in the trunk layers must have data (not the LM head,
  // which it collects only on request, nor an MTP block, which the main pass never runs).
  const ModelConfig c = config_from_gguf(model, "model");
  const ProductNames pn = product_names(c, model);
  for (int il = 0; il < c.n_layer; ++il) {
    for (int p = 0; p < kProducts; ++p) {
      const std::string& name = pn.of(il, static_cast<Product>(p));
      if (name.empty() || m.entries.count(name)) continue;
      const auto it = shapes.find(name);
      if (it == shapes.end()) continue;  // the loader reports a model that lacks it
      throw Error(strfmt("imatrix has no entry for the model's tensor '%s' %s (made for another model?)", name.c_str(),
                         shape_str(it->second).c_str()));
    }
  }
}

}  // namespace les
