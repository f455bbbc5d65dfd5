// In-memory replacement of a resident model's weight tensors (Model::replace_tensor): every Matrix
// or ExpertStack view whose data is the tensor's bytes is pointed at the replacement.
#include <functional>

#include "les/model/model.h"
#include "les/util/error.h"

namespace les {

namespace {

// Calls fm on every Matrix view and fs on every ExpertStack view of the weights.
void for_each_view(ModelWeights& w, const std::function<void(Matrix&)>& fm, const std::function<void(ExpertStack&)>& fs) {
  auto layer = [&](LayerWeights& L) {
    for (Matrix* m : {&L.wq, &L.wk, &L.wv, &L.wo, &L.router, &L.shexp_gate_inp, &L.shexp_gate, &L.shexp_up,
                      &L.shexp_down, &L.ssm_qkv, &L.ssm_z, &L.ssm_beta, &L.ssm_alpha, &L.ssm_out, &L.ssm_ba,
                      &L.ssm_in, &L.ffn_gate, &L.ffn_up, &L.ffn_down, &L.wq_a, &L.wq_b, &L.wkv_a, &L.wk_b, &L.wv_b}) {
      fm(*m);
    }
    for (ExpertStack* s : {&L.gate, &L.up, &L.down}) fs(*s);
  };
  fm(w.tok_embd);
  fm(w.output);
  for (LayerWeights& L : w.layers) layer(L);
  if (w.mtp.present()) {
    layer(w.mtp.block);
    fm(w.mtp.eh_proj);
    fm(w.mtp.embed);
    fm(w.mtp.head);
  }
}

}  // namespace

void Model::replace_tensor(const std::string& name, Type t, std::vector<uint8_t> bytes) {
  const gguf::TensorInfo* ti = gguf_.find_tensor(name);
  if (!ti) throw Error(strfmt("%s: replace_tensor: no tensor '%s'", path_.c_str(), name.c_str()));
  if (!file_image() || pack_) {
    throw Error(strfmt("%s: replace_tensor needs a resident, unpacked model", path_.c_str()));
  }
  if (ti->ne.size() < 2) throw Error(strfmt("%s: replace_tensor: '%s' is not a matrix", path_.c_str(), name.c_str()));
  if (!info(t).weight_type || ti->ne[0] % block_size(t) != 0) {
    throw Error(strfmt("%s: replace_tensor: type %s cannot hold rows of %lld elements ('%s')", path_.c_str(),
                       type_name(t), static_cast<long long>(ti->ne[0]), name.c_str()));
  }
  const size_t rb = row_bytes(t, ti->ne[0]);
  const size_t n_rows = static_cast<size_t>(ti->n_elements() / ti->ne[0]);
  if (bytes.size() != rb * n_rows) {
    throw Error(strfmt("%s: replace_tensor: '%s' as %s needs %zu bytes, got %zu", path_.c_str(), name.c_str(),
                       type_name(t), rb * n_rows, bytes.size()));
  }
  // Views currently point at the file's bytes or at an earlier replacement.
  auto prev = replaced_.find(name);
  const uint8_t* old_data = prev != replaced_.end() ? prev->second.data() : file_image() + gguf_.data_offset + ti->offset;
  std::vector<uint8_t> buf = std::move(bytes);
  const uint8_t* new_data = buf.data();
  int n_views = 0;
  for_each_view(
      w_,
      [&](Matrix& m) {
        if (m.data != old_data || !m.present()) return;
        m.type = t;
        m.row_bytes = rb;
        m.data = new_data;
        ++n_views;
      },
      [&](ExpertStack& s) {
        if (s.data != old_data || !s.present()) return;
        s.type = t;
        s.row_bytes = rb;
        s.expert_bytes = rb * static_cast<size_t>(s.n_out);
        s.expert_stride = s.expert_bytes;
        s.data = new_data;
        ++n_views;
      });
  if (n_views == 0) {
    throw Error(strfmt("%s: replace_tensor: '%s' is not a weight matrix of the model", path_.c_str(), name.c_str()));
  }
  replaced_[name] = std::move(buf);
}

void Model::restore_tensor(const std::string& name) {
  auto it = replaced_.find(name);
  if (it == replaced_.end()) return;
  const gguf::TensorInfo* ti = gguf_.find_tensor(name);
  LES_ASSERT(ti != nullptr);
  const uint8_t* cur = it->second.data();
  const uint8_t* orig = file_image() + gguf_.data_offset + ti->offset;
  const size_t rb = row_bytes(ti->type, ti->ne[0]);
  for_each_view(
      w_,
      [&](Matrix& m) {
        if (m.data != cur) return;
        m.type = ti->type;
        m.row_bytes = rb;
        m.data = orig;
      },
      [&](ExpertStack& s) {
        if (s.data != cur) return;
        s.type = ti->type;
        s.row_bytes = rb;
        s.expert_bytes = rb * static_cast<size_t>(s.n_out);
        s.expert_stride = s.expert_bytes;
        s.data = orig;
      });
  replaced_.erase(it);
}

}  // namespace les
