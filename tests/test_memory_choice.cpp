// Where memory goes (src/les/engine/memory_choice.h): resident or streamed, the automatic budget
// and the context, from fake meminfo and cgroup values; the engine following the choice; and
// `les run` inside a real memory cgroup where this machine lets the test make one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <cstdlib>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "les/engine/engine.h"
#include "les/engine/memory_choice.h"
#include "les/gguf/gguf.h"
#include "les/sched/budget.h"
#include "les/util/error.h"
#include "model_edit.h"
#include "test_util.h"

namespace les {
namespace {

constexpr uint64_t MiB = uint64_t{1} << 20;
constexpr uint64_t GiB = uint64_t{1} << 30;

ModelFootprint tiny_footprint() {
  const std::string p = test::tiny_moe_path();
  return footprint_of(gguf::read_file(p), p);
}

MemoryFacts facts(uint64_t mem_available, uint64_t cgroup = UINT64_MAX, bool huge = true) {
  MemoryFacts f;
  f.mem_available = mem_available;
  f.cgroup_headroom = cgroup;
  f.huge_pages = huge;
  return f;
}

bool has(const std::string& s, const char* part) { return s.find(part) != std::string::npos; }

TEST(MemoryChoice, FootprintSplitsDenseAndExpertBytes) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const ModelFootprint fp = tiny_footprint();
  auto m = Model::load(test::tiny_moe_path(), LoadOptions{.map_experts = false});
  EXPECT_EQ(fp.dense_bytes, m->dense_bytes());
  uint64_t experts = 0;
  for (int l = 0; l < 8; ++l) {
    EXPECT_EQ(fp.layer_expert_bytes[static_cast<size_t>(l)], m->expert_size(l)) << l;
    experts += 64 * m->expert_size(l);
  }
  EXPECT_EQ(fp.expert_bytes, experts);
  EXPECT_LE(fp.dense_bytes + fp.expert_bytes, fp.file_bytes);
  // The estimate bounds the engine's real slots from above.
  const std::vector<uint64_t> real = StreamingExperts::layer_slot_bytes_for(*m, storage::IoMode::pread);
  const std::vector<uint64_t> est = fp.slot_bytes_estimate();
  ASSERT_EQ(est.size(), real.size());
  for (size_t l = 0; l < real.size(); ++l) EXPECT_GE(est[l], real[l]) << l;
}

TEST(MemoryChoice, ResidentWhenTheModelFits) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const ModelFootprint fp = tiny_footprint();
  const MemoryChoice ch = choose_memory(fp, MemoryRequest{}, facts(8 * GiB));
  EXPECT_EQ(ch.mode, MemoryMode::read);
  EXPECT_EQ(ch.n_ctx, 512);  // the training context (under 4096)
  EXPECT_TRUE(has(ch.why, "resident (read)")) << ch.why;
  EXPECT_TRUE(has(ch.why, "8.00 GiB available")) << ch.why;
  // No transparent huge pages: mapped. Unknown memory: resident as before.
  EXPECT_EQ(choose_memory(fp, MemoryRequest{}, facts(8 * GiB, UINT64_MAX, false)).mode, MemoryMode::map);
  EXPECT_EQ(choose_memory(fp, MemoryRequest{}, facts(0)).mode, MemoryMode::read);
  // --mmap / --no-mmap force residence whatever the memory.
  MemoryRequest r;
  r.resident = ResidentMemory::map;
  EXPECT_EQ(choose_memory(fp, r, facts(300 * MiB)).mode, MemoryMode::map);
  r.resident = ResidentMemory::read;
  EXPECT_EQ(choose_memory(fp, r, facts(300 * MiB)).mode, MemoryMode::read);
}

TEST(MemoryChoice, StreamsWithAnAutomaticBudgetWhenItDoesNotFit) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const ModelFootprint fp = tiny_footprint();
  // 300 MiB available: the resident rule keeps 1 GiB free, so the model streams within the
  // available memory less max(128 MiB, 1/16).
  for (bool say_auto : {false, true}) {
    MemoryRequest r;
    r.mem_auto = say_auto;
    const MemoryChoice ch = choose_memory(fp, r, facts(300 * MiB));
    EXPECT_EQ(ch.mode, MemoryMode::stream);
    EXPECT_TRUE(ch.budget_automatic);
    EXPECT_EQ(ch.budget, 300 * MiB - 128 * MiB);
    EXPECT_EQ(ch.margin, 128 * MiB);
    EXPECT_EQ(ch.n_ctx, 512);
    EXPECT_TRUE(has(ch.why, "streaming experts")) << ch.why;
    EXPECT_TRUE(has(ch.why, "automatic budget 0.17 GiB")) << ch.why;
  }
  // A larger machine keeps a sixteenth free.
  const MemoryChoice big = choose_memory(fp, MemoryRequest{}, facts(40 * GiB, 2 * GiB + fp.file_bytes / 2));
  // (fits: 2 GiB + a half model is more than the model plus the resident margin)
  EXPECT_EQ(big.mode, MemoryMode::read);
  EXPECT_EQ(streaming_margin(16 * GiB), 1 * GiB);
  EXPECT_EQ(streaming_margin(1 * GiB), 128 * MiB);
}

TEST(MemoryChoice, TheCgroupLimitBindsAndIsNamed) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const ModelFootprint fp = tiny_footprint();
  // Plenty in MemAvailable, little in the memory cgroup (a container's limit).
  const MemoryChoice ch = choose_memory(fp, MemoryRequest{}, facts(20 * GiB, 320 * MiB));
  EXPECT_EQ(ch.mode, MemoryMode::stream);
  EXPECT_EQ(ch.budget, 320 * MiB - 128 * MiB);
  EXPECT_TRUE(has(ch.why, "(memory cgroup limit)")) << ch.why;
  // A limit below what streaming needs: one clear error with the minimum and its parts.
  const std::string e = test::error_of([&] { choose_memory(fp, MemoryRequest{}, facts(20 * GiB, 150 * MiB)); });
  EXPECT_TRUE(has(e, "(memory cgroup limit)")) << e;
  EXPECT_TRUE(has(e, "too little to stream this model, which needs at least")) << e;
  EXPECT_TRUE(has(e, "dense weights")) << e;
}

TEST(MemoryChoice, ExplicitBudgetAndContext) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  const ModelFootprint fp = tiny_footprint();
  MemoryRequest r;
  r.mem = 64 * MiB;
  MemoryChoice ch = choose_memory(fp, r, facts(8 * GiB));  // fits, but --mem streams
  EXPECT_EQ(ch.mode, MemoryMode::stream);
  EXPECT_FALSE(ch.budget_automatic);
  EXPECT_EQ(ch.budget, 64 * MiB);
  EXPECT_TRUE(has(ch.why, "--mem 0.06 GiB")) << ch.why;
  r.n_ctx = 300;
  EXPECT_EQ(choose_memory(fp, r, facts(8 * GiB)).n_ctx, 300);
  // A -c whose KV cache cannot fit: the numbers, and the largest halving that fits.
  r.n_ctx = 65536;
  const std::string e = test::error_of([&] { choose_memory(fp, r, facts(8 * GiB)); });
  EXPECT_TRUE(has(e, "-c 65536 needs a KV cache of 512.0 MiB, and the budget of 64.0 MiB leaves")) << e;
  EXPECT_TRUE(has(e, "fits")) << e;
  // Too small a budget: the minimum and its parts.
  r.n_ctx = 0;
  r.mem = 20 * MiB;
  const std::string e2 = test::error_of([&] { choose_memory(fp, r, facts(8 * GiB)); });
  EXPECT_TRUE(has(e2, "--mem 20.0 MiB is too small: this model needs at least")) << e2;
  // --mem with --mmap, --no-mmap or --mem auto.
  r.mem = 64 * MiB;
  r.resident = ResidentMemory::map;
  EXPECT_THROW(choose_memory(fp, r, facts(8 * GiB)), Error);
}

TEST(MemoryChoice, ContextHalvesUntilItsKvCacheFitsAQuarter) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  ModelFootprint fp = tiny_footprint();
  fp.config.n_ctx_train = 262144;  // as a 35B-A3B file advertises
  MemoryRequest r;
  r.mem = 60 * MiB;
  const MemoryChoice ch = choose_memory(fp, r, facts(8 * GiB));
  ASSERT_EQ(ch.mode, MemoryMode::stream);
  EXPECT_LT(ch.n_ctx, 4096);
  EXPECT_GE(ch.n_ctx, 256);
  EXPECT_EQ(ch.n_ctx & (ch.n_ctx - 1), 0) << "halvings of the trained 262144";
  const StateBytes s = state_bytes(fp.config, false, ch.n_ctx, r.n_batch);
  const double room = static_cast<double>(r.mem - fp.dense_bytes - fp.min_cache_bytes() - s.work - s.overhead);
  EXPECT_LE(static_cast<double>(s.kv), 0.25 * room);
  const StateBytes twice = state_bytes(fp.config, false, 2 * ch.n_ctx, r.n_batch);
  EXPECT_GT(static_cast<double>(twice.kv),
            0.25 * static_cast<double>(r.mem - fp.dense_bytes - fp.min_cache_bytes() - twice.work - twice.overhead));
  EXPECT_TRUE(has(ch.why, "of the trained 262144, to fit")) << ch.why;
  // Resident models get the trained context where it fits (an f32 cache of 8 KiB a position: 2 GiB
  // at 262144), else the largest halving that fits, down to 4096.
  EXPECT_EQ(choose_memory(fp, MemoryRequest{}, facts(64 * GiB)).n_ctx, 262144);
  const MemoryChoice tight = choose_memory(fp, MemoryRequest{}, facts(2 * GiB));
  EXPECT_EQ(tight.mode, MemoryMode::read);
  EXPECT_EQ(tight.n_ctx, 65536) << tight.why;  // 0.5 GiB of cache beside 1 GiB of margin
  // 1200 MiB less the margin leave about 174 MiB: 36 of weights, the work buffers and 64 MiB of
  // cache at 8192 fit, 128 MiB at 16384 do not.
  EXPECT_EQ(choose_memory(fp, MemoryRequest{}, facts(1200 * MiB)).n_ctx, 8192);
}

TEST(MemoryChoice, ADenseModelThatDoesNotFitIsMapped) {
  LES_REQUIRE_FILE(test::tiny_draft_path());
  const std::string p = test::tiny_draft_path();
  const ModelFootprint fp = footprint_of(gguf::read_file(p), p);
  EXPECT_EQ(fp.expert_bytes, 0u);
  const MemoryChoice ch = choose_memory(fp, MemoryRequest{}, facts(300 * MiB));
  EXPECT_EQ(ch.mode, MemoryMode::map);
  EXPECT_TRUE(has(ch.why, "dense model has no experts to stream")) << ch.why;
  MemoryRequest r;
  r.mem = 64 * MiB;
  EXPECT_TRUE(has(test::error_of([&] { choose_memory(fp, r, facts(300 * MiB)); }), "this model is dense"));
}

// The engine follows the choice: with fake facts that leave too little for the model it streams
// within the automatic budget, and decodes exactly what the resident engine decodes.
TEST(MemoryChoice, EngineStreamsWhenTheFactsSaySoAndDecodesTheSame) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  auto decode = [](EngineOptions o) {
    Engine e(std::move(o));
    EngineRequest req;
    req.n_predict = 12;
    req.sampling.temp = 0;
    const EngineResult r = e.generate(e.tokenize("And God said,", false), req, [](std::string_view) { return true; });
    return std::make_pair(e.streaming(), r.stats.final_logits_hash);
  };
  EngineOptions o;
  o.model_path = test::tiny_moe_path();
  o.memory_facts = facts(8 * GiB);
  const auto resident = decode(o);
  EXPECT_FALSE(resident.first);
  o.memory_facts = facts(20 * GiB, 300 * MiB);
  const auto streamed = decode(o);
  EXPECT_TRUE(streamed.first);
  EXPECT_EQ(streamed.second, resident.second);
  o.memory_facts = facts(20 * GiB, 300 * MiB);
  Engine e(o);
  EXPECT_EQ(e.memory_choice().budget, 172 * MiB);
  EXPECT_EQ(e.budget().total, 172 * MiB);
  EXPECT_EQ(e.n_ctx(), 512);
}

// `les run` inside a real memory cgroup (v1 or v2) of 320 MiB: it streams by itself, says so
// naming the cgroup, stays under the limit and prints what the resident run prints. Needs a
// writable cgroup file system (root, not every container).
TEST(MemoryChoice, RunInsideAMemoryCgroupStreamsByItself) {
  LES_REQUIRE_FILE(test::tiny_moe_path());
  if (test::kSanitized) LES_SKIP_PLATFORM("sanitizer build: its shadow memory does not fit a small cgroup");
  namespace fs = std::filesystem;
  const std::string name = "les-test-" + std::to_string(::getpid());
  fs::path dir, limit_file, procs, peak_file;
  if (fs::exists("/sys/fs/cgroup/memory/memory.limit_in_bytes") || fs::exists("/sys/fs/cgroup/memory/tasks")) {
    dir = fs::path("/sys/fs/cgroup/memory") / name;
    limit_file = dir / "memory.limit_in_bytes";
    peak_file = dir / "memory.max_usage_in_bytes";
  } else if (fs::exists("/sys/fs/cgroup/cgroup.controllers")) {
    dir = fs::path("/sys/fs/cgroup") / name;
    limit_file = dir / "memory.max";
    peak_file = dir / "memory.peak";
  }
  std::error_code ec;
  if (dir.empty() || !fs::create_directory(dir, ec)) {
    LES_SKIP_PLATFORM("no writable memory cgroup here (needs root and a cgroup file system)");
  }
  struct Remove {
    fs::path d;
    ~Remove() { ::rmdir(d.c_str()); }
  } remove{dir};
  {
    std::ofstream lf(limit_file);
    lf << 320 * MiB;
  }
  procs = dir / "cgroup.procs";
  const std::string base = "run -m '" + test::tiny_moe_path() + "' -p 'And God said,' -n 16 --temp 0";
  std::string resident, limited;
  ASSERT_EQ(test::run_les(base, &resident), 0) << resident;
  // The shell joins the cgroup, then becomes les (the same process).
  const std::string errf = test::temp_dir() + "/stderr";
  const int rc = std::system(("echo $$ > '" + procs.string() + "' && exec " + std::string(LES_CLI) + " " + base +
                              " >/dev/null 2>'" + errf + "'")
                                 .c_str());
  {
    std::ifstream ef(errf);
    limited.assign(std::istreambuf_iterator<char>(ef), std::istreambuf_iterator<char>());
  }
  std::remove(errf.c_str());
  ASSERT_EQ(rc, 0) << limited;
  EXPECT_TRUE(has(limited, "streaming experts")) << limited;
  EXPECT_TRUE(has(limited, "(memory cgroup limit)")) << limited;
  auto hash_of = [](const std::string& err) {
    const size_t p = err.find("final logits hash: ");
    return p == std::string::npos ? std::string() : err.substr(p + 19, 16);
  };
  EXPECT_EQ(hash_of(limited), hash_of(resident));
  std::ifstream pf(peak_file);
  uint64_t peak = 0;
  if (pf >> peak) {
    EXPECT_LT(peak, 320 * MiB);
  }
}

}  // namespace
}  // namespace les
