// Limits with a defined behaviour (docs/hardening.md): generation up to the context length stops
// with stop reason "context"; a prompt or an eval that does not fit is an error; a KV cache that
// cannot be allocated (huge context, address-space limit) is an error naming the context size,
// never std::bad_alloc escaping or a crash.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <climits>
#include <cstdio>
#include <fstream>
#include <string>

#include <gtest/gtest.h>

#include "les/model/context.h"
#include "les/model/model.h"
#include "les/session/generate.h"
#include "les/tokenizer/tokenizer.h"
#include "model_edit.h"
#include "skip.h"

using namespace les;
using les::test::error_of;
using les::test::ScopedDir;

namespace {

using les::test::kSanitized;

// vm.overcommit_memory: 0 heuristic (refuses a mapping larger than RAM + swap), 1 always, 2 never.
int overcommit_mode() {
  std::ifstream f("/proc/sys/vm/overcommit_memory");
  int mode = -1;
  f >> mode;
  return mode;
}

}  // namespace

TEST(Limits, GenerationStopsAtTheContextLength) {
  ScopedDir d;
  auto m = Model::load(les::test::small_synth_model(d, "m.gguf"));
  Tokenizer tok(vocab_from_gguf(m->gguf()));
  const std::vector<int32_t> prompt = {10, 20, 30};
  for (int n_predict : {-1, 100}) {
    Context ctx(*m, ContextParams{.n_ctx = 8, .n_threads = 1});
    GenerateParams gp;
    gp.n_predict = n_predict;
    gp.stop_at_eog = false;
    int calls = 0;
    const GenerateStats st = generate(ctx, tok, prompt, gp, [&](int32_t, const std::string&) {
      ++calls;
      return true;
    });
    // The context fills up: positions 0..7 are evaluated; the token sampled from the last
    // position's logits is returned but not evaluated (there is no room for it).
    EXPECT_EQ(st.stop_reason, "context") << n_predict;
    EXPECT_EQ(ctx.n_past(), 8);
    EXPECT_EQ(st.n_generated, 8 - 3 + 1);
    EXPECT_EQ(calls, st.n_generated);
    // Nothing more fits: an eval is an error, and so is a new generation.
    const int32_t one = 1;
    EXPECT_NE(error_of([&] { ctx.eval(std::span<const int32_t>(&one, 1), false); }).find("context is full"),
              std::string::npos);
    EXPECT_NE(error_of([&] { generate(ctx, tok, {1}, gp, {}); }).find("raise -c"), std::string::npos);
  }
  // A prompt longer than the context is refused before anything is evaluated.
  Context small(*m, ContextParams{.n_ctx = 2, .n_threads = 1});
  GenerateParams gp;
  EXPECT_NE(error_of([&] { generate(small, tok, prompt, gp, {}); }).find("the prompt has 3 tokens but the context holds 2"),
            std::string::npos);
  EXPECT_EQ(small.n_past(), 0);
}

TEST(Limits, HugeContextIsAClearErrorNotBadAlloc) {
  if (overcommit_mode() == 1) LES_SKIP_PLATFORM("vm.overcommit_memory = 1: a huge allocation would succeed and be touched");
  // ASan's and TSan's operator new abort on failure instead of throwing std::bad_alloc.
  if (kSanitized) LES_SKIP_PLATFORM("sanitizer build: its allocator reports a failed new as fatal");
  ScopedDir d;
  auto m = Model::load(les::test::small_synth_model(d, "m.gguf", "q8_0", 4));
  // 4 layers x INT_MAX positions x 32 floats: 1 TiB, more than this machine's RAM + swap.
  const std::string msg = error_of([&] { Context ctx(*m, ContextParams{.n_ctx = INT_MAX, .n_threads = 1}); });
  EXPECT_NE(msg.find("cannot allocate the KV cache"), std::string::npos) << msg;
  EXPECT_NE(msg.find("2147483647 positions"), std::string::npos) << msg;
}

// Under an address-space limit (RLIMIT_AS) the allocation fails: a clear error in a child
// process. Sanitizer runtimes reserve terabytes of address space, so this runs unsanitized only.
TEST(Limits, AllocationFailureUnderAddressSpaceLimit) {
  if (kSanitized) LES_SKIP_PLATFORM("sanitizer build: RLIMIT_AS is incompatible with its shadow memory");
  ScopedDir d;
  const std::string path = les::test::small_synth_model(d, "m.gguf", "q8_0", 4);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 3;
    try {
      auto m = Model::load(path);
      // Current address space + 256 MiB; the KV cache below needs 512 MiB.
      std::ifstream statm("/proc/self/statm");
      unsigned long pages = 0;
      statm >> pages;
      const rlim_t limit = static_cast<rlim_t>(pages) * static_cast<rlim_t>(::sysconf(_SC_PAGESIZE)) + (256u << 20);
      const rlimit rl{limit, limit};
      if (::setrlimit(RLIMIT_AS, &rl) != 0) ::_exit(4);
      const int n_ctx = (512 << 20) / (4 * 32 * 4);
      try {
        Context ctx(*m, ContextParams{.n_ctx = n_ctx, .n_threads = 1});
        code = 1;  // allocated despite the limit
      } catch (const les::Error& e) {
        code = std::string(e.what()).find("cannot allocate the KV cache") != std::string::npos ? 0 : 2;
        if (code) std::fprintf(stderr, "unexpected message: %s\n", e.what());
      }
    } catch (...) {
      code = 5;
    }
    ::_exit(code);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status)) << "child crashed (signal " << WTERMSIG(status) << ")";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: allocated anyway, 2: other message, 3-5: setup failed";
}
