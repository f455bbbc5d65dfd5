#include <cstdio>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/model/model.h"
#include "les/pack/pack.h"
#include "les/util/error.h"
#include "les/util/progress.h"

namespace les::cli {

int cmd_verify(int argc, char** argv) {
  Args a("verify",
         "check a model: its structure, that les can load it, and that no weight or block scale is NaN or "
         "infinite; for a packed model (les pack) also every expert's checksum: les verify FILE",
         {});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  if (a.positional().size() != 1) throw Error("expected FILE");
  const std::string& path = a.positional()[0];
  // Structure as les uses it: GGUF container, pack metadata, architecture table (every shape,
  // every tensor used). Maps the file; reads nothing else.
  const auto model = Model::load(path, LoadOptions{.map_experts = true});
  Progress bar("verify", 1);
  const pack::VerifySummary s = pack::verify_weights(path, [&](uint64_t done, uint64_t total) {
    bar.set_total(total);
    bar.update(done);
  });
  bar.finish();
  for (const std::string& p : s.problems) std::fprintf(stderr, "les verify: %s: %s\n", path.c_str(), p.c_str());
  if (!s.ok()) {
    std::fprintf(stderr, "les verify: %s: FAILED: %zu problem(s) in %lld tensors, %d packed layers, %lld experts\n",
                 path.c_str(), s.problems.size(), static_cast<long long>(s.tensors), s.layers,
                 static_cast<long long>(s.experts));
    return 1;
  }
  std::fprintf(stderr, "%s: OK: %lld tensors, %d packed layers, %lld experts, %s checked in %.2f s\n", path.c_str(),
               static_cast<long long>(s.tensors), s.layers, static_cast<long long>(s.experts),
               human_bytes(s.bytes).c_str(), s.seconds);
  return 0;
}

}  // namespace les::cli
