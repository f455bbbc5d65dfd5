// A model file truncated while the engine runs: streamed experts read past the new end of file.
// Every I/O backend must turn that into a les::Error naming the file (and the expert), never
// into logits computed from short or stale data. Resident (memory-mapped) mode cannot detect it
// (the kernel raises SIGBUS on a mapped page past the end); docs/hardening.md says so.
#include <unistd.h>

#include <algorithm>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "les/model/context.h"
#include "les/model/model.h"
#include "les/sched/streaming_experts.h"
#include "greedy_hashes.h"
#include "model_edit.h"

using namespace les;
using les::test::ScopedDir;

TEST(LiveTruncation, StreamedReadsPastTheNewEndAreErrors) {
  ScopedDir d;
  const std::string src = les::test::small_synth_model(d, "m.gguf", "q8_0", 4);
  const gguf::File f = gguf::read_file(src);
  // Cut inside layer 0's expert stack: every expert of layers 1..3 is gone.
  const gguf::TensorInfo* first = f.find_tensor("blk.0.ffn_gate_exps.weight");
  ASSERT_NE(first, nullptr);
  const off_t cut = static_cast<off_t>(f.data_offset + first->offset + first->n_bytes / 2);
  const std::vector<uint8_t> bytes = les::test::read_bytes(src);
  const std::vector<int32_t> prompt = {11, 97, 203, 5};
  for (storage::IoMode io : {storage::IoMode::pread, storage::IoMode::uring, storage::IoMode::naive}) {
    if (io == storage::IoMode::uring && !storage::have_uring()) continue;
    SCOPED_TRACE(storage::io_mode_name(io));
    const std::string path = d.file(std::string("live-") + storage::io_mode_name(io) + ".gguf");
    les::test::write_file_bytes(path, bytes.data(), bytes.size());
    auto m = Model::load(path, LoadOptions{.map_experts = false});
    // The smallest cache (k slots): every token reads experts again.
    StreamingExperts ex(*m, les::test::stream_opts(*m, Schedule::lookahead, io, m->config().n_expert_used));
    Context ctx(*m, ContextParams{.n_ctx = 32, .n_threads = 1}, &ex);
    ctx.eval(prompt, false);  // intact file: works
    ASSERT_EQ(::truncate(path.c_str(), cut), 0);
    int evals = 0;
    try {
      for (int32_t t = 1; t < 20; ++t) {
        ctx.eval(std::span<const int32_t>(&t, 1), false);
        ++evals;
      }
      FAIL() << "reads past the truncated end were not reported";
    } catch (const les::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find(path), std::string::npos) << msg;
      EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
      EXPECT_NE(msg.find("expert"), std::string::npos) << msg;
    }
    // Cached experts may serve a token or two; the first read past the end fails.
    EXPECT_LT(evals, 3);
  }
}
