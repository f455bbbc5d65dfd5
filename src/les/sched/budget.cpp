#include "les/sched/budget.h"

#include <sys/resource.h>

#include <algorithm>

#include "les/model/kv_cache.h"
#include "les/model/delta_net.h"
#include "les/sched/streaming_experts.h"
#include "les/util/error.h"

namespace les {

namespace {
double mib(uint64_t b) { return static_cast<double>(b) / 1048576.0; }
}  // namespace

std::string BudgetPlan::describe() const {
  const std::string rec = recurrent ? strfmt(" + recurrent state %.1f", mib(recurrent)) : std::string();
  const std::string dr = drafter ? strfmt(" + %s %.1f", drafter_label.c_str(), mib(drafter)) : std::string();
  const bool one_size = cache == n_slots * slot_bytes;
  return strfmt("budget %.1f MiB = dense %.1f + KV %.1f%s + work %.1f + overhead %.1f%s + expert cache %.1f "
                "(%llu slots of %s%.2f MiB)",
                mib(total), mib(dense), mib(kv), rec.c_str(), mib(work), mib(overhead), dr.c_str(), mib(cache),
                static_cast<unsigned long long>(n_slots), one_size ? "" : "up to ", mib(slot_bytes));
}

uint64_t kv_bytes_per_position(const ModelConfig& c, bool with_mtp, Type type_k, Type type_v) {
  const uint64_t n_kv_layers = static_cast<uint64_t>(c.n_layer - c.n_recurrent() + (with_mtp ? 1 : 0));
  if (c.mla()) return n_kv_layers * static_cast<uint64_t>(c.kv_floats_per_pos()) * sizeof(float);
  return n_kv_layers * (kv_row_bytes(type_k, c.n_kv_k()) + kv_row_bytes(type_v, c.n_kv_v()));
}

StateBytes state_bytes(const ModelConfig& c, bool with_mtp, int n_ctx, int n_batch, Type type_k, Type type_v) {
  StateBytes s;
  s.kv = static_cast<uint64_t>(n_ctx) * kv_bytes_per_position(c, with_mtp, type_k, type_v);
  s.recurrent = c.n_recurrent() > 0 ? RecurrentState::bytes_for(c) : 0;
  // Per batch token: residual, norm, q/k/v, attention output, router logits, K expert outputs,
  // expert intermediates; plus the output logits of one row.
  const uint64_t per_tok = (4ull * c.n_embd + c.n_q() + c.n_kv_k() + c.n_kv_v() + c.n_head * c.head_dim_v +
                            c.n_expert + static_cast<uint64_t>(c.n_expert_used) * c.n_embd + 3ull * c.n_ff_exp) *
                           sizeof(float) * 2 +
                           (c.n_recurrent() > 0 ? DeltaNetMixer::floats_per_token(c) * sizeof(float) : 0) +
                           (c.attn_output_gate ? 3ull * c.n_q() * sizeof(float) : 0);
  s.work = per_tok * static_cast<uint64_t>(std::max(1, n_batch)) + static_cast<uint64_t>(c.n_vocab) * 8 +
           static_cast<uint64_t>(n_ctx) * 4 * 2;
  s.overhead = 16ull << 20;  // code, libraries, tokenizer, allocator slack (measured ~12 MiB)
  return s;
}

BudgetPlan plan_budget(const Model& model, uint64_t mem_bytes, int n_ctx, int n_batch,
                       const std::vector<uint64_t>& layer_slot_bytes, uint64_t drafter_bytes, Type type_k,
                       Type type_v) {
  const ModelConfig& c = model.config();
  LES_ASSERT(!layer_slot_bytes.empty());
  BudgetPlan p;
  p.total = mem_bytes;
  p.dense = model.dense_bytes();
  const StateBytes st = state_bytes(c, model.weights().mtp.runnable(), n_ctx, n_batch, type_k, type_v);
  p.kv = st.kv;
  p.recurrent = st.recurrent;
  p.work = st.work;
  p.overhead = st.overhead;
  p.slot_bytes = *std::max_element(layer_slot_bytes.begin(), layer_slot_bytes.end());
  p.drafter = drafter_bytes;
  const uint64_t fixed = p.fixed();
  // n_expert_used slots of each distinct slot size (each size is a pool of its own).
  std::vector<uint64_t> sizes = layer_slot_bytes;
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  sizes.erase(std::remove(sizes.begin(), sizes.end(), uint64_t{0}), sizes.end());  // dense lead layers
  uint64_t min_cache = 0;
  for (uint64_t s : sizes) min_cache += s * static_cast<uint64_t>(c.n_expert_used);
  const std::string slots_desc =
      sizes.size() == 1 ? strfmt("%d expert slots of %.2f MiB", c.n_expert_used, mib(sizes[0]))
                        : strfmt("%d expert slots of each of %zu slot sizes, %.2f MiB", c.n_expert_used, sizes.size(),
                                 mib(min_cache));
  if (mem_bytes < fixed + min_cache) {
    throw Error(strfmt("--mem %.1f MiB is too small: this model needs at least %.1f MiB (dense weights %.1f, "
                       "KV cache %.1f at context %d, recurrent state %.1f, work buffers %.1f, overhead %.1f, drafter %.1f, "
                       "and %s)",
                       mib(mem_bytes), mib(fixed + min_cache), mib(p.dense), mib(p.kv), n_ctx, mib(p.recurrent), mib(p.work),
                       mib(p.overhead), mib(p.drafter), slots_desc.c_str()));
  }
  p.cache = 0;
  p.n_slots = 0;
  for (const SlotClassPlan& cl : plan_slot_classes(layer_slot_bytes, c.n_expert, c.n_expert_used, mem_bytes - fixed)) {
    p.cache += cl.slot_bytes * static_cast<uint64_t>(cl.n_slots);
    p.n_slots += static_cast<uint64_t>(cl.n_slots);
  }
  return p;
}

BudgetPlan plan_budget(const Model& model, uint64_t mem_bytes, int n_ctx, int n_batch, uint64_t slot_bytes,
                       uint64_t drafter_bytes, Type type_k, Type type_v) {
  const int n_layers = std::max(1, model.config().n_layer);
  return plan_budget(model, mem_bytes, n_ctx, n_batch, std::vector<uint64_t>(static_cast<size_t>(n_layers), slot_bytes),
                     drafter_bytes, type_k, type_v);
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace les
