// Expert streaming: logits are bit-identical to the fully resident model for every schedule,
// cache size, I/O mode and thread count; faults give retries or clear errors; the smallest cache
// never deadlocks; resident experts compute first.
#include <algorithm>
#include <cstring>

#include "les/model/context.h"
#include "les/sched/budget.h"
#include "les/pack/pack.h"
#include "les/sched/stream_report.h"
#include "les/sched/streaming_experts.h"
#include "les/storage/expert_layout.h"
#include "les/util/error.h"
#include "les/util/hash.h"
#include "greedy_hashes.h"
#include "les/convert/quantize_model.h"
#include "model_edit.h"
#include "test_util.h"

using namespace les;
using les::test::tiny_moe_path;

namespace {

const std::vector<int32_t> kPrompt = {785, 3974, 293, 4830, 282, 5131, 7784, 82};

std::vector<uint64_t> run_hashes(const Model& m, ExpertSource* src, int threads, int n_gen = 12) {
  return les::test::greedy_hashes(m, src, kPrompt, n_gen, threads);
}

StreamingOptions opts(const Model& m, Schedule s, storage::IoMode io, int slots) {
  return les::test::stream_opts(m, s, io, slots);
}

// Lookahead over a saturated fake disk: every read of the model's bytes takes 1.5 ms, one at a time.
StreamingOptions slow_disk_opts(const Model& m, const std::vector<uint8_t>& bytes) {
  StreamingOptions o = opts(m, Schedule::lookahead, storage::IoMode::fake, 128);
  o.file = storage::make_memory_file(bytes, "tiny-moe (slow disk)", 4096);
  o.queue_depth = 1;
  // Slow enough that the disk stays busy even when a loaded (sanitized, parallel) run computes slowly.
  o.io.fake.latency = std::chrono::microseconds(4000);
  return o;
}

}  // namespace

TEST(Streaming, BitIdenticalAcrossSchedulesCachesThreadsAndIoModes) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto streamed = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  EXPECT_EQ(streamed->weights().layers[0].gate.data, nullptr) << "experts must not be mapped when streaming";
  const auto ref = run_hashes(*resident, nullptr, 1);
  const int total = 8 * 64;
  for (Schedule s : {Schedule::ondemand, Schedule::lookahead}) {
    for (int slots : {4, 16, total / 4, total}) {
      for (int threads : {1, 2}) {
        for (storage::IoMode io : {storage::IoMode::pread, storage::IoMode::uring, storage::IoMode::naive}) {
          if (io == storage::IoMode::uring && !storage::have_uring()) continue;
          if (io != storage::IoMode::pread && (threads == 2 || (slots != total / 4))) continue;  // keep it quick
          StreamingExperts ex(*streamed, opts(*streamed, s, io, slots));
          EXPECT_EQ(run_hashes(*streamed, &ex, threads), ref)
              << schedule_name(s) << " slots=" << slots << " threads=" << threads << " io=" << storage::io_mode_name(io);
          EXPECT_GT(ex.stats().total().selected, 0u);
        }
      }
    }
  }
}

// Every predictor variant (early guess only, refined with the layer's output, refined with
// cancellation, two-ahead statistics with unbounded prefetch bytes in flight, two-ahead
// prefetching) computes the same
// logits; the refined guess is measured and at least as good as chance.
TEST(Streaming, PredictorVariantsAreBitIdentical) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto streamed = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 1);
  for (int variant = 0; variant < 5; ++variant) {
    for (int slots : {8, 128}) {
      StreamingOptions o = opts(*streamed, Schedule::lookahead, storage::IoMode::pread, slots);
      o.refine = variant != 0;
      o.refine_cancel = variant == 2;
      o.measure_ahead2 = variant == 3;
      o.prefetch_ahead2 = variant == 4;
      o.prefetch_inflight = variant == 3 ? (uint64_t(1) << 40) : 0;
      StreamingExperts ex(*streamed, o);
      EXPECT_EQ(run_hashes(*streamed, &ex, 1), ref) << "variant " << variant << " slots " << slots;
      const LayerStreamStats t = ex.stats().total();
      if (variant == 0) {
        EXPECT_EQ(t.raw_refined_hits_k, 0u);
      } else {
        EXPECT_GT(static_cast<double>(t.raw_refined_hits_k), 0.3 * static_cast<double>(t.selected));
      }
      if (variant >= 3) {
        EXPECT_GT(t.ahead2_selected, 0u);
        EXPECT_GT(static_cast<double>(t.raw_ahead2_hits_k), 0.2 * static_cast<double>(t.ahead2_selected));
      } else {
        EXPECT_EQ(t.ahead2_selected, 0u);
      }
      // Wasted bytes are whole prefetched experts, never more than was prefetched or issued.
      EXPECT_LE(t.bytes_wasted, t.prefetch_issued * ex.slot_bytes());
    }
  }
}

// On a saturated disk the throttle skips guesses whose recent precision is below half the disk's
// busy fraction (here the ones ranked past k); without it every guess is read. The busy fraction
// is pinned to 1 (a measured one depends on how fast a loaded, sanitized run computes beside the
// slow disk). Logits are the same either way.
TEST(Streaming, ThrottleSkipsImpreciseGuessesOnABusyDisk) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 1, 24);
  const auto bytes = les::test::read_bytes(tiny_moe_path());
  uint64_t throttled[2] = {0, 0};
  uint64_t extra_issued[2] = {0, 0};
  for (int on = 0; on < 2; ++on) {
    StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::fake, 128);
    o.file = storage::make_memory_file(bytes, "tiny-moe", 4096);
    o.predict_extra = 4;  // guesses ranked k+1..k+m are right far less than half the time
    o.throttle = on == 1;
    o.fixed_disk_busy = 1.0;
    StreamingExperts ex(*m, o);
    EXPECT_EQ(run_hashes(*m, &ex, 1, 24), ref) << "throttle " << on;
    throttled[on] = ex.stats().total().prefetch_throttled;
    for (int pos = m->config().n_expert_used; pos < kGuessPositions; ++pos) extra_issued[on] += ex.stats().guess_issued[pos];
    EXPECT_GT(ex.stats().total().prefetch_issued, 0u) << "the throttle never stops prefetching altogether";
  }
  EXPECT_EQ(throttled[0], 0u);
  EXPECT_GT(throttled[1], 0u);
  EXPECT_LT(extra_issued[1], extra_issued[0]) << "the imprecise extra guesses are the ones skipped";
}

// The routing oracle (a benchmark instrument): recorded by an ondemand run, replayed by lookahead
// runs of the same tokens at several depths. The logits are the same; every selection of a
// step is predicted (the first step's layer 0 excepted: nothing before it predicts it), none
// of its prefetches is wasted, and replaying from a fresh oracle (nothing
// recorded) predicts nothing.
TEST(Streaming, RoutingOracleReplaysTheRecordedRoutingExactly) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 1, 16);
  auto oracle = std::make_shared<RoutingOracle>(m->config().n_layer);
  {
    StreamingOptions o = opts(*m, Schedule::ondemand, storage::IoMode::pread, 64);
    o.oracle = oracle;
    o.oracle_record = true;
    StreamingExperts ex(*m, o);
    EXPECT_EQ(run_hashes(*m, &ex, 1, 16), ref);
  }
  // One prompt batch + 16 decode steps, each step with every layer recorded.
  ASSERT_EQ(oracle->steps(), 17);
  for (int l = 0; l < m->config().n_layer; ++l) {
    ASSERT_NE(oracle->lookup(1, l), nullptr);
    EXPECT_EQ(oracle->lookup(1, l)->size(), static_cast<size_t>(m->config().n_expert_used));
  }
  EXPECT_EQ(oracle->lookup(17, 0), nullptr);
  EXPECT_EQ(oracle->lookup(-1, 0), nullptr);
  // The recording crosses a pipe as integers (les bench): the copy replays the same routing.
  const auto copy = std::make_shared<RoutingOracle>(RoutingOracle::unflatten(oracle->flatten()));
  EXPECT_EQ(copy->flatten(), oracle->flatten());
  ASSERT_EQ(copy->steps(), 17);
  for (int l = 0; l < m->config().n_layer; ++l) EXPECT_EQ(*copy->lookup(16, l), *oracle->lookup(16, l));
  std::vector<int32_t> flat = oracle->flatten();
  EXPECT_THROW(RoutingOracle::unflatten(std::span<const int32_t>(flat.data(), flat.size() - 1)), Error);  // ends early
  flat.push_back(3);
  EXPECT_THROW(RoutingOracle::unflatten(flat), Error);  // trailing data
  EXPECT_THROW(RoutingOracle::unflatten(std::vector<int32_t>{0, 1}), Error);  // no layers
  EXPECT_THROW(RoutingOracle::unflatten(std::vector<int32_t>{1, 1, -2}), Error);  // a negative count
  EXPECT_EQ(RoutingOracle::unflatten(std::vector<int32_t>{2, 1, -1, 1, 5}).lookup(0, 0), nullptr);
  EXPECT_EQ(*RoutingOracle::unflatten(std::vector<int32_t>{2, 1, -1, 1, 5}).lookup(0, 1), std::vector<int32_t>{5});
  for (int depth : {1, 2, 5}) {
    StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::pread, 64);
    o.oracle = depth == 2 ? copy : oracle;
    o.oracle_depth = depth;
    StreamingExperts ex(*m, o);
    EXPECT_EQ(run_hashes(*m, &ex, 1, 16), ref) << "depth " << depth;
    const LayerStreamStats t = ex.stats().total();
    // Every selection is guessed except the first step's layer 0 (the prompt batch of 8 tokens
    // is short enough to be guessed too).
    for (int l = 0; l < m->config().n_layer; ++l) {
      const LayerStreamStats& ls = ex.stats().layers[static_cast<size_t>(l)];
      const uint64_t unguessable = l == 0 ? oracle->lookup(0, 0)->size() : 0;
      EXPECT_EQ(ls.raw_pred_hits_k, ls.selected - unguessable) << "depth " << depth << " layer " << l;
    }
    EXPECT_EQ(t.bytes_wasted, 0u) << "depth " << depth;
    EXPECT_EQ(t.prefetch_used + t.prefetch_cancelled, t.prefetch_issued) << "depth " << depth;
    if (depth > 1) {
      EXPECT_GT(t.raw_ahead2_hits_k, 0u);
    }
  }
  StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::pread, 64);
  o.oracle = std::make_shared<RoutingOracle>(m->config().n_layer);
  StreamingExperts ex(*m, o);
  EXPECT_EQ(run_hashes(*m, &ex, 1, 4), les::test::greedy_hashes(*resident, nullptr, kPrompt, 4, 1));
  EXPECT_EQ(ex.stats().total().prefetch_issued, 0u);
}

// The two-ahead prefetch reads into the disk's idle time: on a busy disk (every read slow, one at
// a time) it stops once the busy fraction of demand and prefetch reads is measured above
// ahead2_max_busy (here 0.05: how busy the disk gets depends on the speed of the compute, which
// sanitizer builds slow down), while with the limit at 1 it keeps prefetching; on a fast disk the
// default limit lets it run. Logits are the same in every case.
TEST(Streaming, TwoAheadPrefetchStopsOnABusyDisk) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 1, 24);
  const auto bytes = les::test::read_bytes(tiny_moe_path());
  uint64_t issued[2] = {0, 0};
  for (int limited = 0; limited < 2; ++limited) {
    StreamingOptions o = slow_disk_opts(*m, bytes);
    o.prefetch_ahead2 = true;
    o.ahead2_max_busy = limited ? 0.05 : 1.0;
    StreamingExperts ex(*m, o);
    EXPECT_EQ(run_hashes(*m, &ex, 1, 24), ref) << "limited " << limited;
    issued[limited] = ex.stats().guess_issued[kGuessAhead2];
  }
  EXPECT_GT(issued[0], 20u);
  {
    StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::fake, 128);
    o.file = storage::make_memory_file(bytes, "tiny-moe (fast disk)", 4096);
    o.prefetch_ahead2 = true;
    StreamingExperts ex(*m, o);
    EXPECT_EQ(run_hashes(*m, &ex, 1, 24), ref);
    EXPECT_GT(ex.stats().guess_issued[kGuessAhead2], 20u) << "the default limit must not stop it on a fast disk";
  }
  EXPECT_LT(issued[1], issued[0] / 2) << "two-ahead prefetches: " << issued[0] << " unlimited, " << issued[1] << " limited";
}

TEST(Streaming, LookaheadPredictsAndPrefetches) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  StreamingExperts ex(*m, opts(*m, Schedule::lookahead, storage::IoMode::pread, 128));
  run_hashes(*m, &ex, 1, 24);
  const LayerStreamStats t = ex.stats().total();
  EXPECT_GT(t.prefetch_issued, 0u);
  EXPECT_GT(t.prefetch_used, t.prefetch_issued / 3) << "prefetch precision implausibly low";
  // The raw predictor's recall at k (layers 1..7) on real text is ~0.7 per the model's README;
  // over a short greedy run it must at least clearly beat chance (k/E = 0.0625).
  const double recall = static_cast<double>(t.raw_pred_hits_k) / static_cast<double>(t.selected);
  EXPECT_GT(recall, 0.3);
  const double prepared = static_cast<double>(t.hits + t.in_flight) / static_cast<double>(t.selected);
  EXPECT_GT(prepared, 0.5);
  // ondemand never prefetches.
  StreamingExperts od(*m, opts(*m, Schedule::ondemand, storage::IoMode::pread, 128));
  run_hashes(*m, &od, 1, 4);
  EXPECT_EQ(od.stats().total().prefetch_issued, 0u);
  EXPECT_EQ(od.stats().total().bytes_prefetch, 0u);
}

TEST(Streaming, FaultsAreRetriedOrReported) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 1, 6);
  const auto bytes = les::test::read_bytes(tiny_moe_path());

  // Slow, short and interrupted reads: same logits.
  {
    StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::fake, 32);
    o.file = storage::make_memory_file(bytes, "tiny-moe (slow, short reads)", 4096);
    o.io.fake.latency = std::chrono::microseconds(200);
    o.io.fake.max_read = 8192;  // short reads stop at block boundaries, as O_DIRECT ones do
    o.io.fake.eintr_every = 5;
    StreamingExperts ex(*m, o);
    EXPECT_EQ(run_hashes(*m, &ex, 1, 6), ref);
    EXPECT_GT(ex.stats().io.retries, 0u);
  }
  // Persistent EIO: a clear error, not wrong logits.
  {
    StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::fake, 32);
    o.file = storage::make_memory_file(bytes, "tiny-moe (failing)", 4096);
    o.io.fake.eio_after_ops = 40;
    StreamingExperts ex(*m, o);
    try {
      run_hashes(*m, &ex, 1, 6);
      FAIL() << "EIO was not reported";
    } catch (const les::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("expert"), std::string::npos) << msg;
      EXPECT_NE(msg.find("layer"), std::string::npos) << msg;
    }
  }
}

// Read shaping: an expert read as aligned chunks in flight at once lands in its slot exactly as
// one read does, on every backend, with short and interrupted reads; an EIO inside one chunk is
// retried, then reported naming the layer and expert. A chunk that is not a multiple of the
// file's alignment is refused.
TEST(Streaming, ChunkedReadsAreBitIdenticalOnEveryBackend) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 1, 6);
  const auto bytes = les::test::read_bytes(tiny_moe_path());
  uint64_t ops_whole = 0;
  {
    StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::pread, 32);
    StreamingExperts ex(*m, o);
    EXPECT_EQ(run_hashes(*m, &ex, 1, 6), ref);
    ops_whole = ex.stats().io.ops;
  }
  for (storage::IoMode io : {storage::IoMode::pread, storage::IoMode::uring, storage::IoMode::fake}) {
    if (io == storage::IoMode::uring && !storage::have_uring()) continue;
    for (uint64_t chunk : {uint64_t{4096}, uint64_t{3} * 4096}) {
      StreamingOptions o = opts(*m, Schedule::lookahead, io, 32);
      o.read_chunk = chunk;
      if (io == storage::IoMode::fake) {
        o.file = storage::make_memory_file(bytes, "tiny-moe (short reads)", 4096);
        o.io.fake.max_read = 8192;
        o.io.fake.eintr_every = 7;
      }
      StreamingExperts ex(*m, o);
      EXPECT_EQ(run_hashes(*m, &ex, 1, 6), ref) << storage::io_mode_name(io) << " chunk " << chunk;
      EXPECT_GT(ex.stats().io.ops, 2 * ops_whole) << "the experts were not read in chunks";
    }
  }
  // EIO inside the third chunk of every expert of layer 1: a clear error naming the layer.
  const ExpertLayout layout(*m, 4096);
  StreamingOptions o = opts(*m, Schedule::ondemand, storage::IoMode::fake, 512);
  o.file = storage::make_memory_file(bytes, "tiny-moe (EIO in a chunk)", 4096);
  o.read_chunk = 4096;
  for (int e = 0; e < m->config().n_expert; ++e) {
    const SlotRead first = layout.reads(1, e).front();
    ASSERT_GT(first.length, 3u * 4096);
    o.io.fake.eio_offsets.push_back(first.file_offset + 2 * 4096 + 100);
  }
  StreamingExperts ex(*m, o);
  try {
    run_hashes(*m, &ex, 1, 2);
    FAIL() << "EIO inside a chunk was not reported";
  } catch (const les::Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("of layer 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("expert"), std::string::npos) << msg;
  }
  StreamingOptions bad = opts(*m, Schedule::lookahead, storage::IoMode::pread, 32);
  bad.read_chunk = 5000;
  EXPECT_THROW(StreamingExperts(*m, bad), les::Error);
}

// io_uring fixed buffers over the expert slots: reads into them go as READ_FIXED (where the kernel
// grants the registration) and every logit stays bit-identical, chunked or whole, with withheld
// slots (not registered) read as before once released; other backends say they have none.
TEST(Streaming, RegisteredBuffersAreBitIdentical) {
  LES_REQUIRE_FILE(tiny_moe_path());
  if (!storage::have_uring()) LES_SKIP_PLATFORM("io_uring unavailable (kernel or seccomp)");
  auto resident = Model::load(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 1, 6);
  for (uint64_t chunk : {uint64_t{0}, uint64_t{2} * 4096}) {
    for (bool reg : {true, false}) {
      StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::uring, 32);
      o.read_chunk = chunk;
      o.register_buffers = reg;
      o.withheld_bytes = reg ? 8 * StreamingExperts::slot_bytes_for(*m, storage::IoMode::uring) : 0;
      StreamingExperts ex(*m, o);
      if (reg && ex.stats().registered_bytes == 0) {
        std::printf("registration refused here (%s): READ_FIXED not exercised\n", ex.stats().register_note.c_str());
      }
      EXPECT_EQ(run_hashes(*m, &ex, 1, 6), ref) << "registered " << reg << " chunk " << chunk;
      const storage::IoCounters io = ex.stats().io;
      if (reg && ex.stats().registered_bytes > 0) {
        uint64_t in_use = 0;  // the slots in use, of every slot size (the withheld ones are not registered)
        for (const auto& [bytes, slots] : ex.stats().slot_classes) in_use += bytes * static_cast<uint64_t>(slots);
        EXPECT_EQ(ex.stats().registered_bytes, in_use);
        EXPECT_GT(io.fixed_reads, 0u);
        EXPECT_LE(io.fixed_reads, io.syscalls);
        // Released slots are outside the registration: their reads go as plain reads.
        ex.release_withheld();
        EXPECT_EQ(run_hashes(*m, &ex, 1, 6), ref) << "after release, chunk " << chunk;
      }
      if (!reg) {
        EXPECT_EQ(io.fixed_reads, 0u);
      }
    }
  }
  StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::pread, 32);
  StreamingExperts ex(*m, o);
  EXPECT_EQ(ex.stats().registered_bytes, 0u);
  EXPECT_NE(ex.stats().register_note.find("no registered buffers"), std::string::npos) << ex.stats().register_note;
}

TEST(Streaming, SmallestCacheHandlesBigBatches) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto resident = Model::load(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  // 4 slots = k (of each of the file's two slot sizes): a 32-token prompt routes to far more than 4
  // distinct experts per layer.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 32; ++i) prompt.push_back(100 + 37 * i);
  auto logits_of = [&](const Model& model, ExpertSource* src) {
    Context ctx(model, ContextParams{.n_ctx = 64, .n_threads = 2}, src);
    ctx.eval(prompt, true);
    return hash64(ctx.logits(0), sizeof(float) * 8000 * 32);
  };
  for (Schedule s : {Schedule::ondemand, Schedule::lookahead}) {
    StreamingExperts ex(*m, opts(*m, s, storage::IoMode::pread, 4));
    EXPECT_EQ(logits_of(*m, &ex), logits_of(*resident, nullptr)) << schedule_name(s);
  }
  StreamingOptions too_small = opts(*m, Schedule::lookahead, storage::IoMode::pread, 4);
  too_small.cache_bytes -= 1;  // one byte short of 4 slots of each size
  EXPECT_THROW(StreamingExperts(*m, too_small), les::Error);
}

TEST(Streaming, ResidentExpertsComputeFirst) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::fake, 16);
  o.file = storage::make_memory_file(les::test::read_bytes(tiny_moe_path()), "tiny-moe", 4096);
  o.io.fake.latency = std::chrono::microseconds(2000);
  StreamingExperts ex(*m, o);
  auto noop = [](size_t, const ExpertView&) {};
  const std::vector<int32_t> warm = {5, 9};
  ex.with_experts(3, warm, noop);  // 5 and 9 of layer 3 are now resident
  std::vector<size_t> order;
  const std::vector<int32_t> ids = {1, 5, 2, 9};
  ex.with_experts(3, ids, [&](size_t i, const ExpertView& v) {
    EXPECT_NE(v.gate.data, nullptr);
    order.push_back(i);
  });
  ASSERT_EQ(order.size(), 4u);
  EXPECT_EQ(order[0], 1u);  // expert 5: resident
  EXPECT_EQ(order[1], 3u);  // expert 9: resident
  // ondemand computes in router order.
  StreamingOptions o2 = o;
  o2.schedule = Schedule::ondemand;
  StreamingExperts od(*m, o2);
  od.with_experts(3, warm, noop);
  order.clear();
  od.with_experts(3, ids, [&](size_t i, const ExpertView&) { order.push_back(i); });
  EXPECT_EQ(order, (std::vector<size_t>{0, 1, 2, 3}));
}

TEST(Streaming, BudgetTooSmallStatesTheMinimum) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const uint64_t sb = StreamingExperts::slot_bytes_for(*m, storage::IoMode::uring);
  try {
    plan_budget(*m, 8ull << 20, 512, 256, sb);
    FAIL() << "8 MiB accepted";
  } catch (const les::Error& e) {
    EXPECT_NE(std::string(e.what()).find("at least"), std::string::npos) << e.what();
  }
  const BudgetPlan p = plan_budget(*m, 64ull << 20, 512, 256, sb);
  EXPECT_GE(p.n_slots, 4u);
  EXPECT_LE(p.dense + p.kv + p.work + p.overhead + p.cache, p.total);
}

// The bundled Q4_K_M file has two expert sizes (its down projections are Q8_0 in some layers and
// Q5_0 in others): the minimum budget holds n_expert_used slots of each, the budget at exactly that
// minimum streams, and a budget beyond every expert holds every expert and no more.
TEST(Streaming, BudgetMinimumCountsEverySlotSize) {
  LES_REQUIRE_FILE(tiny_moe_path());
  auto m = Model::load(tiny_moe_path(), LoadOptions{.map_experts = false});
  const std::vector<uint64_t> sizes = StreamingExperts::layer_slot_bytes_for(*m, storage::IoMode::pread);
  std::vector<uint64_t> distinct = sizes;
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  ASSERT_EQ(distinct.size(), 2u);
  const BudgetPlan big = plan_budget(*m, 1ull << 40, 64, 16, sizes);
  uint64_t all = 0;
  for (uint64_t b : sizes) all += b * 64;
  EXPECT_EQ(big.cache, all) << "more slots than experts";
  EXPECT_EQ(big.n_slots, 8u * 64u);
  const uint64_t min = big.fixed() + 4 * (distinct[0] + distinct[1]);
  const std::string msg = les::test::error_of([&] { plan_budget(*m, min - 1, 64, 16, sizes); });
  EXPECT_NE(msg.find("4 expert slots of each of 2 slot sizes"), std::string::npos) << msg;
  const BudgetPlan p = plan_budget(*m, min, 64, 16, sizes);
  EXPECT_EQ(p.n_slots, 8u);
  StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::pread, 4);
  o.cache_bytes = p.cache;
  StreamingExperts ex(*m, o);
  EXPECT_EQ(ex.n_slots(), 8);
  auto resident = Model::load(tiny_moe_path());
  EXPECT_EQ(run_hashes(*m, &ex, 1, 4), run_hashes(*resident, nullptr, 1, 4));
}

// Slot pools: the cache's bytes split in proportion to the bytes of the experts each pool serves,
// every pool at least min_slots, nothing over the cache, leftovers to the least-served pool.
TEST(SlotClasses, SplitInProportionToExpertBytes) {
  const uint64_t K = 4096;
  // One size: one pool of cache / size slots.
  auto one = plan_slot_classes({3 * K, 3 * K, 3 * K}, 16, 4, 100 * K);
  ASSERT_EQ(one.size(), 1u);
  EXPECT_EQ(one[0].n_slots, 33);
  EXPECT_EQ(one[0].layers, (std::vector<int>{0, 1, 2}));
  // Three sizes over five layers.
  const std::vector<uint64_t> sizes = {4 * K, 2 * K, 2 * K, 1 * K, 4 * K};
  for (uint64_t cache : {40 * K, 97 * K, 180 * K, 250 * K, 1000 * K}) {
    const auto p = plan_slot_classes(sizes, 16, 2, cache);
    ASSERT_EQ(p.size(), 3u);
    EXPECT_EQ(p[0].slot_bytes, 4 * K);  // largest first
    EXPECT_EQ(p[0].layers, (std::vector<int>{0, 4}));
    EXPECT_EQ(p[2].layers, (std::vector<int>{3}));
    uint64_t used = 0;
    for (const auto& c : p) {
      EXPECT_GE(c.n_slots, 2);
      used += c.slot_bytes * static_cast<uint64_t>(c.n_slots);
    }
    EXPECT_LE(used, cache);
    if (cache >= 13 * 16 * K) {
      // More than every expert: each pool holds all of its experts, the rest stays unused.
      EXPECT_EQ(used, 13 * 16 * K);
      for (const auto& c : p) EXPECT_EQ(c.n_slots, static_cast<int>(c.layers.size()) * 16);
      continue;
    }
    EXPECT_GT(used + 1 * K, cache) << "a leftover that fits the smallest slot was not handed out";
    // Fractions of each pool's experts held: equal up to a slot or two (and the minimum).
    if (cache >= 180 * K) {
      const double f0 = p[0].n_slots / 32.0, f1 = p[1].n_slots / 32.0, f2 = p[2].n_slots / 16.0;
      EXPECT_NEAR(f0, f1, 2.0 / 16);
      EXPECT_NEAR(f0, f2, 2.0 / 16);
    }
  }
  // A pool raised to min_slots takes its bytes from the others (one slot of 1 KiB for 16 experts,
  // 7 layers of 8 KiB): the proportional split gives the 8 KiB pool 5 slots, which no longer fit
  // beside the 1 KiB pool's 4; it gives one back, and the leftover goes to the 1 KiB pool.
  const std::vector<uint64_t> skewed = {1 * K, 8 * K, 8 * K, 8 * K, 8 * K, 8 * K, 8 * K, 8 * K};
  const auto t = plan_slot_classes(skewed, 16, 4, 43 * K);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[0].n_slots, 4);
  EXPECT_EQ(t[1].n_slots, 11);
  // Too small for min_slots of each size: the error names the sizes.
  const std::string msg = les::test::error_of([&] { plan_slot_classes(sizes, 16, 4, 20 * K); });
  EXPECT_NE(msg.find("each expert size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("0.02 MiB (2 layers)"), std::string::npos) << msg;
}

// A mixed-precision file (expert types differ by layer, so slot sizes do): one pool per size,
// and the logits stay bit-identical to the resident model for both schedules and cache sizes.
TEST(SlotClasses, MixedPrecisionFileStreamsBitIdentically) {
  LES_REQUIRE_FILE(tiny_moe_path());
  const std::string dir = les::test::temp_dir();
  const std::string path = dir + "/mixed-experts.gguf";
  QuantizePlan plan;
  plan.recipe = Recipe::pure;
  plan.keep_unlisted = true;
  plan.n_threads = 2;
  const Type cycle[] = {Type::Q4_K, Type::Q2_K, Type::Q8_0, Type::Q3_K};
  for (int l = 0; l < 8; ++l) {
    for (const char* t : {"ffn_gate_exps", "ffn_up_exps", "ffn_down_exps"}) {
      plan.overrides["blk." + std::to_string(l) + "." + t + ".weight"] = cycle[l % 4];
    }
  }
  quantize_model(tiny_moe_path(), path, plan);
  auto resident = Model::load(path);
  auto streamed = Model::load(path, LoadOptions{.map_experts = false});
  const auto ref = run_hashes(*resident, nullptr, 2);
  const uint64_t largest = StreamingExperts::slot_bytes_for(*streamed, storage::IoMode::pread);
  for (Schedule s : {Schedule::ondemand, Schedule::lookahead}) {
    for (int slots : {16, 64, 256}) {
      StreamingOptions o = opts(*streamed, s, storage::IoMode::pread, slots);
      StreamingExperts ex(*streamed, o);
      ASSERT_EQ(ex.slot_classes().size(), 4u);
      // Smaller slots for the smaller types: more experts than the largest slot size allows.
      EXPECT_GT(static_cast<uint64_t>(ex.n_slots()), o.cache_bytes / largest);
      EXPECT_EQ(run_hashes(*streamed, &ex, 2), ref) << schedule_name(s) << " slots=" << slots;
      EXPECT_EQ(ex.stats().slot_classes.size(), 4u);
    }
  }
  std::string cleanup = "rm -rf '" + dir + "'";
  (void)std::system(cleanup.c_str());
}

// Who collects io_uring completions follows the layout (docs/io.md): a completion thread where an
// expert is several reads (the original GGUF), the decoding thread where it is one (packed; where
// the kernel has COOP_TASKRUN). Logits are identical either way, and --stats says which.
TEST(Streaming, CompletionReapingFollowsTheLayout) {
  LES_REQUIRE_FILE(tiny_moe_path());
  if (!storage::have_uring()) LES_SKIP_PLATFORM("io_uring unavailable (kernel or seccomp)");
  les::test::ScopedDir d;
  const std::string packed = d.file("tiny-packed.gguf");
  pack::pack_model(tiny_moe_path(), packed);
  auto resident = Model::load(tiny_moe_path());
  const auto ref = run_hashes(*resident, nullptr, 1, 6);
  for (const std::string& path : {tiny_moe_path(), packed}) {
    auto m = Model::load(path, LoadOptions{.map_experts = false});
    const bool is_packed = path == packed;
    std::string explicit_caller;
    for (int mode : {-1, 0, 1}) {
      SCOPED_TRACE(path + " mode " + std::to_string(mode));
      StreamingOptions o = opts(*m, Schedule::lookahead, storage::IoMode::uring, 32);
      o.io_completion_thread = mode;
      StreamingExperts ex(*m, o);
      EXPECT_EQ(run_hashes(*m, &ex, 1, 6), ref);
      const std::string by = ex.stats().completions_by;
      if (mode == 1) {
        EXPECT_EQ(by, "a completion thread");
      }
      if (mode == 0) explicit_caller = by;  // "a completion thread" on a kernel without COOP_TASKRUN
      if (mode == -1 && !is_packed) {
        EXPECT_EQ(by, "a completion thread");
      }
      if (mode == -1 && is_packed) {
        o.io_completion_thread = 0;
        StreamingExperts probe(*m, o);
        EXPECT_EQ(by, probe.stats().completions_by);
        if (by != "the caller's thread") std::printf("this kernel has no COOP_TASKRUN: %s\n", by.c_str());
      }
      EXPECT_NE(format_stream_table(ex.stats(), RunSummary{}).find("completions collected by " + by), std::string::npos);
    }
    EXPECT_TRUE(explicit_caller == "the caller's thread" || explicit_caller == "a completion thread") << explicit_caller;
  }
}
