#include <unistd.h>

#include <cstdio>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/convert/quantize_model.h"
#include "les/util/error.h"
#include "les/util/progress.h"

namespace les::cli {

int cmd_quantize(int argc, char** argv) {
  Args a("quantize", "convert a model's weights: les quantize IN.gguf OUT.gguf TYPE (e.g. q4_k_m, q4_K, iq4_xs, q8_0, f16)",
         {{{"-t", "--threads"}, true, "threads (default 2)", "N"},
          {{"--force"}, false, "overwrite OUT if it exists"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  if (a.positional().size() != 3) throw Error("expected IN.gguf OUT.gguf TYPE");
  const std::string& in = a.positional()[0];
  const std::string& out = a.positional()[1];
  QuantizePlan plan = parse_quantize_plan(a.positional()[2]);
  plan.n_threads = static_cast<int>(a.i64("--threads", 2));
  if (!a.has("--force") && access(out.c_str(), F_OK) == 0) {
    throw Error(strfmt("%s exists (use --force to overwrite)", out.c_str()));
  }
  Progress bar("quantize", 1);
  quantize_model(in, out, plan, [&](uint64_t done, uint64_t total) {
    bar.set_total(total);
    bar.update(done);
  });
  bar.finish();
  std::fprintf(stderr, "wrote %s\n", out.c_str());
  return 0;
}

}  // namespace les::cli
