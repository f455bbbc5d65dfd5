#include <cstdio>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/pack/pack.h"
#include "les/util/error.h"
#include "les/util/progress.h"

namespace les::cli {

int cmd_pack(int argc, char** argv) {
  Args a("pack",
         "repack a MoE model so that each expert (gate+up+down) is one contiguous, 4 KiB-aligned extent: "
         "les pack IN.gguf OUT.gguf (the output is a GGUF file; docs/packed_format.md)",
         {{{"--force"}, false, "overwrite OUT if it exists"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  if (a.positional().size() != 2) throw Error("expected IN.gguf OUT.gguf");
  const std::string& in = a.positional()[0];
  const std::string& out = a.positional()[1];
  Progress bar("pack", 1);
  const pack::PackSummary s = pack::pack_model(in, out, pack::PackOptions{.overwrite = a.has("--force")},
                                               [&](uint64_t done, uint64_t total) {
                                                 bar.set_total(total);
                                                 bar.update(done);
                                               });
  bar.finish();
  std::fprintf(stderr,
               "wrote %s: %d MoE layers, %lld experts, %s of experts + %s padding (%s in, %s out) in %.2f s "
               "(%.1f MB/s written)\n",
               out.c_str(), s.layers, static_cast<long long>(s.experts), human_bytes(s.expert_bytes).c_str(),
               human_bytes(s.padding_bytes).c_str(), human_bytes(s.source_bytes).c_str(),
               human_bytes(s.output_bytes).c_str(), s.seconds,
               s.seconds > 0 ? static_cast<double>(s.output_bytes) / 1e6 / s.seconds : 0.0);
  return 0;
}

}  // namespace les::cli
