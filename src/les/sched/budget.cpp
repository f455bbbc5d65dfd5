#include "les/sched/budget.h"

#include <sys/resource.h>

#include <algorithm>

#include "les/model/delta_net.h"
#include "les/util/error.h"

namespace les {

namespace {
double mib(uint64_t b) { return static_cast<double>(b) / 1048576.0; }
}  // namespace

std::string BudgetPlan::describe() const {
  const std::string rec = recurrent ? strfmt(" + recurrent state %.1f", mib(recurrent)) : std::string();
  const std::string dr = drafter ? strfmt(" + drafter %.1f", mib(drafter)) : std::string();
  return strfmt("budget %.1f MiB = dense %.1f + KV %.1f%s + work %.1f + overhead %.1f%s + expert cache %.1f "
                "(%llu slots of %.2f MiB)",
                mib(total), mib(dense), mib(kv), rec.c_str(), mib(work), mib(overhead), dr.c_str(), mib(cache),
                static_cast<unsigned long long>(n_slots), mib(slot_bytes));
}

BudgetPlan plan_budget(const Model& model, uint64_t mem_bytes, int n_ctx, int n_batch, uint64_t slot_bytes,
                       uint64_t drafter_bytes) {
  const ModelConfig& c = model.config();
  BudgetPlan p;
  p.total = mem_bytes;
  p.dense = model.dense_bytes();
  const int n_kv_layers = c.n_layer - c.n_recurrent() + (model.weights().mtp.runnable() ? 1 : 0);
  p.kv = static_cast<uint64_t>(n_kv_layers) * static_cast<uint64_t>(n_ctx) *
         static_cast<uint64_t>(c.n_kv_k() + c.n_kv_v()) * sizeof(float);
  p.recurrent = c.n_recurrent() > 0 ? RecurrentState::bytes_for(c) : 0;
  // Per batch token: residual, norm, q/k/v, attention output, router logits, K expert outputs,
  // expert intermediates; plus the output logits of one row.
  const uint64_t per_tok = (4ull * c.n_embd + c.n_q() + c.n_kv_k() + c.n_kv_v() + c.n_head * c.head_dim_v +
                            c.n_expert + static_cast<uint64_t>(c.n_expert_used) * c.n_embd + 3ull * c.n_ff_exp) *
                           sizeof(float) * 2 +
                           (c.n_recurrent() > 0 ? DeltaNetMixer::floats_per_token(c) * sizeof(float) : 0) +
                           (c.attn_output_gate ? 3ull * c.n_q() * sizeof(float) : 0);
  p.work = per_tok * static_cast<uint64_t>(std::max(1, n_batch)) + static_cast<uint64_t>(c.n_vocab) * 8 +
           static_cast<uint64_t>(n_ctx) * 4 * 2;
  p.overhead = 16ull << 20;  // code, libraries, tokenizer, allocator slack (measured ~12 MiB)
  p.slot_bytes = slot_bytes;
  p.drafter = drafter_bytes;
  const uint64_t fixed = p.dense + p.kv + p.recurrent + p.work + p.overhead + p.drafter;
  const uint64_t min_cache = slot_bytes * static_cast<uint64_t>(c.n_expert_used);
  if (mem_bytes < fixed + min_cache) {
    throw Error(strfmt("--mem %.1f MiB is too small: this model needs at least %.1f MiB (dense weights %.1f, "
                       "KV cache %.1f at context %d, recurrent state %.1f, work buffers %.1f, overhead %.1f, drafter %.1f, "
                       "and %d expert slots of %.2f MiB)",
                       mib(mem_bytes), mib(fixed + min_cache), mib(p.dense), mib(p.kv), n_ctx, mib(p.recurrent), mib(p.work),
                       mib(p.overhead), mib(p.drafter), c.n_expert_used, mib(slot_bytes)));
  }
  p.cache = mem_bytes - fixed;
  p.n_slots = p.cache / slot_bytes;
  p.cache = p.n_slots * slot_bytes;
  return p;
}

uint64_t peak_rss_bytes() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<uint64_t>(ru.ru_maxrss) * 1024;
}

}  // namespace les
