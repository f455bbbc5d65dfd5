#include "les/engine/memory_choice.h"

#include <algorithm>
#include <cstdlib>

#include "les/model/kv_cache.h"
#include "les/pack/pack_format.h"
#include "les/sched/budget.h"
#include "les/storage/io.h"
#include "les/util/error.h"
#include "les/util/meminfo.h"

namespace les {

namespace {

constexpr uint64_t kMiB = uint64_t{1} << 20;
constexpr uint64_t kGiB = uint64_t{1} << 30;
constexpr int kDefaultMaxCtx = 4096;
constexpr int kMinAutoCtx = 256;

double gib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(kGiB); }
double mib(uint64_t b) { return static_cast<double>(b) / static_cast<double>(kMiB); }

uint64_t align_up(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }

std::string available_desc(const MemoryFacts& f) {
  const uint64_t a = f.available();
  if (a == UINT64_MAX) return "available memory unknown";
  return strfmt("%.2f GiB available%s", gib(a), f.limited_by_cgroup() ? " (memory cgroup limit)" : "");
}

// The state of n contexts: one overhead, everything else n times.
StateBytes state_of_contexts(StateBytes s, int n) {
  const uint64_t k = static_cast<uint64_t>(std::max(1, n));
  s.kv *= k;
  s.recurrent *= k;
  s.work *= k;
  return s;
}

}  // namespace

std::vector<uint64_t> ModelFootprint::slot_bytes_estimate() const {
  std::vector<uint64_t> out;
  for (uint64_t b : layer_expert_bytes) {
    if (b == 0) continue;
    // Packed: one aligned extent (a page of slack if unaligned). Original: three parts, each
    // rounded to pages with a page of slack (ExpertLayout::part_read_span).
    const uint64_t page = storage::kDirectIoAlign;
    out.push_back(packed ? align_up(b, page) + page : align_up(b, page) + 6 * page);
  }
  return out;
}

uint64_t ModelFootprint::min_cache_bytes() const {
  std::vector<uint64_t> sizes = slot_bytes_estimate();
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  uint64_t total = 0;
  for (uint64_t s : sizes) total += s * static_cast<uint64_t>(config.n_expert_used);
  return total;
}

ModelFootprint footprint_of(const gguf::File& f, const std::string& path) {
  ModelFootprint fp;
  fp.config = config_from_gguf(f, path);
  fp.file_bytes = f.file_size;
  fp.packed = pack::is_packed(f);
  fp.has_mtp = fp.config.n_layer_nextn > 0;
  const int n_layers = fp.config.n_layer + (fp.has_mtp ? fp.config.n_layer_nextn : 0);
  fp.layer_expert_bytes.assign(static_cast<size_t>(std::max(n_layers, fp.config.n_layer)), 0);
  for (const auto& t : f.tensors) {
    if (!is_routed_expert_tensor(t.name)) {
      fp.dense_bytes += t.n_bytes;
      continue;
    }
    fp.expert_bytes += t.n_bytes;
    const int l = tensor_block(t.name);
    if (l >= 0 && static_cast<size_t>(l) < fp.layer_expert_bytes.size() && fp.config.n_expert > 0) {
      fp.layer_expert_bytes[static_cast<size_t>(l)] += t.n_bytes / static_cast<uint64_t>(fp.config.n_expert);
    }
  }
  return fp;
}

uint64_t MemoryFacts::available() const {
  const uint64_t a = mem_available == 0 ? UINT64_MAX : mem_available;
  return std::min(a, cgroup_headroom);
}

MemoryFacts MemoryFacts::of_this_machine() {
  MemoryFacts f;
  f.mem_available = mem_available_bytes();
  f.cgroup_headroom = cgroup_memory_headroom_bytes();
  f.huge_pages = transparent_huge_pages_usable();
  return f;
}

const char* memory_mode_name(MemoryMode m) {
  switch (m) {
    case MemoryMode::read: return "resident (read)";
    case MemoryMode::map: return "resident (mapped)";
    case MemoryMode::stream: return "streaming";
  }
  return "?";
}

uint64_t streaming_margin(uint64_t available) { return std::max<uint64_t>(128 * kMiB, available / 16); }
uint64_t resident_margin(uint64_t weight_bytes) { return kGiB + weight_bytes / 16; }

MemoryChoice choose_memory(const ModelFootprint& fp, const MemoryRequest& req, const MemoryFacts& facts) {
  const ModelConfig& c = fp.config;
  // The resident rule's context floor; the training context is where the choice starts.
  const int default_ctx = c.n_ctx_train > 0 ? std::min(c.n_ctx_train, kDefaultMaxCtx) : kDefaultMaxCtx;
  const int train_ctx = c.n_ctx_train > 0 ? c.n_ctx_train : kDefaultMaxCtx;
  MemoryChoice ch;
  ch.available = facts.available();
  const std::string kv_types = c.mla() ? std::string("f32 latent rows")
                                        : req.type_k == req.type_v ? kv_type_name(req.type_k)
                                                                   : kv_type_name(req.type_k) + " K, " + kv_type_name(req.type_v) + " V";
  const int n_par = std::max(1, req.n_parallel);
  auto state_at = [&](int n) {
    return state_of_contexts(state_bytes(c, fp.has_mtp, n, req.n_batch, req.type_k, req.type_v), n_par);
  };
  const StateBytes at_default = state_at(req.n_ctx > 0 ? req.n_ctx : default_ctx);
  // How the KV cache is named in messages: one, or one per serving slot.
  const std::string kv_name = n_par > 1 ? strfmt("KV caches of %d slots", n_par) : std::string("KV cache");
  const uint64_t weights = fp.dense_bytes + fp.expert_bytes;
  ch.resident_need = weights + at_default.total() + req.drafter_bytes;
  if (req.mem > 0 && (req.mem_auto || req.resident != ResidentMemory::automatic)) {
    throw Error("--mem SIZE excludes --mem auto, --mmap and --no-mmap");
  }

  // Resident as asked, or as chosen.
  auto resident = [&](MemoryMode mode, const std::string& why) {
    ch.mode = mode;
    ch.n_ctx_chosen = req.n_ctx == 0;
    ch.n_ctx = req.n_ctx > 0 ? req.n_ctx : default_ctx;
    if (ch.n_ctx_chosen && ch.available != UINT64_MAX) {
      // The training context where weights, its KV cache and the rest fit beside the margin.
      const uint64_t room = ch.available > resident_margin(weights) ? ch.available - resident_margin(weights) : 0;
      int n = train_ctx;
      while (n > default_ctx && weights + state_at(n).total() + req.drafter_bytes > room) n /= 2;
      ch.n_ctx = std::max(n, default_ctx);
    }
    ch.kv_bytes = state_at(ch.n_ctx).kv;
    ch.why = strfmt("%s: %s; context %d%s (%s %.2f GiB, %s)", memory_mode_name(mode), why.c_str(), ch.n_ctx,
                    n_par > 1 ? strfmt(" in each of %d slots", n_par).c_str() : "", kv_name.c_str(), gib(ch.kv_bytes),
                    kv_types.c_str());
    return ch;
  };
  const std::string sizes = strfmt("the model needs %.2f GiB (weights %.2f + %s %.2f at context %d + work "
                                   "buffers and overhead %.2f%s)",
                                   gib(ch.resident_need), gib(weights), kv_name.c_str(), gib(at_default.kv),
                                   req.n_ctx > 0 ? req.n_ctx : default_ctx,
                                   gib(at_default.work + at_default.overhead + at_default.recurrent),
                                   req.drafter_bytes ? strfmt(" + %s %.2f", req.drafter_label.c_str(), gib(req.drafter_bytes)).c_str() : "");
  if (req.resident == ResidentMemory::map) return resident(MemoryMode::map, "--mmap");
  if (req.resident == ResidentMemory::read) return resident(MemoryMode::read, "--no-mmap");

  if (req.mem == 0) {
    ch.margin = resident_margin(weights);
    const bool fits = ch.available == UINT64_MAX ||
                      (ch.available > ch.margin && ch.resident_need <= ch.available - ch.margin);
    if (fits) {
      const std::string why = strfmt("%s, %s (keeping %.2f GiB free)", sizes.c_str(), available_desc(facts).c_str(),
                                     ch.available == UINT64_MAX ? 0.0 : gib(ch.margin));
      return resident(facts.huge_pages ? MemoryMode::read : MemoryMode::map,
                      facts.huge_pages ? why : why + "; no transparent huge pages: mapped");
    }
    if (!c.moe) {
      return resident(MemoryMode::map, strfmt("%s, %s: a dense model has no experts to stream, so it is mapped from "
                                              "the file and pages",
                                              sizes.c_str(), available_desc(facts).c_str()));
    }
    const uint64_t kept_resident = ch.margin;
    ch.margin = streaming_margin(ch.available);
    const uint64_t min_budget = fp.dense_bytes + state_at(std::min(default_ctx, kMinAutoCtx)).total() +
                                req.drafter_bytes + fp.min_cache_bytes();
    if (ch.available <= ch.margin || ch.available - ch.margin < min_budget) {
      throw Error(strfmt("%.2f GiB are available to this process%s, less a margin of %.2f GiB for the rest of the "
                         "system: too little to stream this model, which needs at least %.2f GiB (dense weights %.2f, "
                         "work buffers, KV cache and overhead %.2f, %s %.2f, %d expert slots of each size %.2f)",
                         gib(ch.available), facts.limited_by_cgroup() ? " (memory cgroup limit)" : "", gib(ch.margin),
                         gib(min_budget), gib(fp.dense_bytes),
                         gib(min_budget - fp.dense_bytes - req.drafter_bytes - fp.min_cache_bytes()),
                         req.drafter_label.c_str(), gib(req.drafter_bytes), c.n_expert_used, gib(fp.min_cache_bytes())));
    }
    ch.budget = ch.available - ch.margin;
    ch.budget_automatic = true;
    ch.why = strfmt("streaming experts: %s, more than the %s less %.2f GiB kept free; automatic budget %.2f GiB (the "
                    "available memory less %.2f GiB for the rest of the system)",
                    sizes.c_str(), available_desc(facts).c_str(), gib(kept_resident), gib(ch.budget), gib(ch.margin));
  } else {
    if (!c.moe) throw Error("--mem streams routed experts, and this model is dense (it has none): run it without --mem");
    ch.budget = req.mem;
  }

  // Streaming: the context.
  ch.mode = MemoryMode::stream;
  const uint64_t beside_kv = fp.dense_bytes + req.drafter_bytes + fp.min_cache_bytes();
  auto kv_at = [&](int n) { return state_at(n); };
  auto room_for_kv = [&](int n) -> int64_t {  // what the budget leaves for the KV cache at context n
    const StateBytes s = kv_at(n);
    return static_cast<int64_t>(ch.budget) - static_cast<int64_t>(beside_kv + s.recurrent + s.work + s.overhead);
  };
  if (req.n_ctx > 0) {
    ch.n_ctx = req.n_ctx;
    const StateBytes s = kv_at(ch.n_ctx);
    if (room_for_kv(ch.n_ctx) < static_cast<int64_t>(s.kv)) {
      int fit = 0;
      for (int n = ch.n_ctx; n >= 1 && fit == 0; n /= 2) {
        if (room_for_kv(n) >= static_cast<int64_t>(kv_at(n).kv)) fit = n;
      }
      throw Error(strfmt("-c %d needs %s of %.1f MiB, and the budget of %.1f MiB leaves %.1f MiB for it after "
                         "the dense weights (%.1f), the work buffers and overhead (%.1f), the %s (%.1f) and the "
                         "smallest expert cache (%.1f)%s",
                         ch.n_ctx, n_par > 1 ? kv_name.c_str() : "a KV cache", mib(s.kv), mib(ch.budget), std::max(0.0, static_cast<double>(room_for_kv(ch.n_ctx)) / kMiB),
                         mib(fp.dense_bytes), mib(s.work + s.overhead + s.recurrent), req.drafter_label.c_str(),
                         mib(req.drafter_bytes), mib(fp.min_cache_bytes()),
                         fit > 0 ? strfmt(": -c %d fits", fit).c_str() : ""));
    }
  } else {
    ch.n_ctx_chosen = true;
    const int floor_ctx = std::max(std::min(default_ctx, kMinAutoCtx), std::min(default_ctx, req.min_ctx));
    int n = train_ctx;
    // Halve while the KV cache takes more than a quarter of what is left for it and the experts.
    while (n > floor_ctx && static_cast<double>(kv_at(n).kv) > 0.25 * static_cast<double>(std::max<int64_t>(0, room_for_kv(n)))) n /= 2;
    n = std::max(n, floor_ctx);
    if (room_for_kv(n) < static_cast<int64_t>(kv_at(n).kv)) {
      const StateBytes s = kv_at(n);
      throw Error(strfmt("--mem %.1f MiB is too small: this model needs at least %.1f MiB (dense weights %.1f, KV cache "
                         "%.1f at context %d, work buffers and overhead %.1f, %s %.1f, and %d expert slots of each "
                         "size, %.1f)",
                         mib(ch.budget), mib(beside_kv + s.total()), mib(fp.dense_bytes), mib(s.kv), n,
                         mib(s.work + s.overhead + s.recurrent), req.drafter_label.c_str(), mib(req.drafter_bytes), c.n_expert_used,
                         mib(fp.min_cache_bytes())));
    }
    ch.n_ctx = n;
  }
  ch.kv_bytes = kv_at(ch.n_ctx).kv;
  const std::string ctx = strfmt("context %d%s (%s %.2f GiB, %s)", ch.n_ctx,
                                 ch.n_ctx_chosen && ch.n_ctx < train_ctx ? strfmt(", of the trained %d, to fit", train_ctx).c_str() : "",
                                 kv_name.c_str(), gib(ch.kv_bytes), kv_types.c_str());
  if (ch.budget_automatic) {
    ch.why += "; " + ctx + " (-c sets it)";
  } else {
    ch.why = strfmt("streaming experts: --mem %.2f GiB (%s); %s", gib(ch.budget), available_desc(facts).c_str(), ctx.c_str());
  }
  return ch;
}

}  // namespace les
