#include <cstdio>

#include "args.h"
#include "commands.h"
#include "common.h"
#include "les/model/model.h"
#include "les/sched/io_probe.h"
#include "les/util/error.h"

namespace les::cli {

int cmd_probe(int argc, char** argv) {
  Args a("probe",
         "measure (or show the cached measure of) the disk holding a model's experts: MB/s and latency by "
         "request size and queue depth, in a burst after idle and sustained, with the model's own expert "
         "reads; the ceilings and --read-chunk auto use it: les probe -m FILE [--refresh]",
         {{{"-m", "--model"}, true, "model file (GGUF)", "FILE"},
          {{"--refresh"}, false, "measure again even when the cache has this device"},
          {{"--io"}, true, "reads: uring (default where the kernel allows it, else pread), pread, naive", "MODE"},
          {{"--queue-depth"}, true, "the engine's reads in flight, for the ceiling and read-shaping lines (default 8)", "N"},
          {{"--json"}, true, "also write the probe as JSON", "FILE"}});
  a.parse(argc, argv);
  if (a.help_requested()) { std::fputs(a.usage().c_str(), stdout); return 0; }
  const auto model = Model::load(a.required("--model"), LoadOptions{.map_experts = false});
  if (!model->config().moe) throw Error(strfmt("%s is not a mixture-of-experts model: no experts to stream", model->path().c_str()));
  IoProbeOptions o;
  o.refresh = a.has("--refresh");
  o.io_mode = storage::parse_io_mode(a.str("--io", storage::io_mode_name(storage::default_io_mode())));
  if (o.io_mode == storage::IoMode::fake) throw Error("--io fake is for tests");
  const int qd = static_cast<int>(a.i64("--queue-depth", 8));
  if (qd < 1 || qd > 1024) throw Error("--queue-depth must be in [1, 1024]");
  const IoProbeResult r = probe_model_io(*model, o);
  std::fputs(storage::format_probe(r.probe).c_str(), stdout);
  std::printf("%s; cache: %s\n", r.cached ? "from the cache (--refresh measures again)" : "measured now",
              o.cache_path.empty() ? "none (set LES_PROBE_CACHE or HOME)" : o.cache_path.c_str());
  if (r.probe.has_loaded()) {
    std::printf("ceiling bandwidth at queue depth <= %d: %.0f MB/s while %d threads compute (the decode ceiling's); "
                "%.0f MB/s with idle cores\n",
                qd, r.probe.ceiling_mbs(qd), r.probe.load_threads, r.probe.idle_ceiling_mbs(qd));
  } else {
    std::printf("ceiling bandwidth at queue depth <= %d: %.0f MB/s\n", qd, r.probe.ceiling_mbs(qd));
  }
  for (const Schedule s : {Schedule::ondemand, Schedule::lookahead}) {
    StreamingOptions so;
    so.schedule = s;
    so.io_mode = o.io_mode;
    so.queue_depth = qd;
    const int k = experts_in_flight(so, *model);
    const storage::ChunkChoice c = storage::choose_read_chunk(r.probe, k, qd);
    std::printf("--read-chunk auto, %s (%d experts in flight): %s (whole %.0f MB/s, chosen %.0f MB/s)\n",
                schedule_name(s), k,
                storage::read_shaping_name(c.chunk).c_str(),
                c.whole_mbs, c.chosen_mbs);
  }
  if (a.has("--json")) {
    const std::string js = storage::probe_json(r.probe);
    write_file_atomic(a.str("--json"), js.data(), js.size());
  }
  return 0;
}

}  // namespace les::cli
