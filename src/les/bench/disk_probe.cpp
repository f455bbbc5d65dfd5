#include "les/bench/disk_probe.h"

#include <chrono>
#include <random>
#include <vector>

#include "les/storage/expert_layout.h"
#include "les/util/error.h"

namespace les::bench {

namespace {
double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}
}  // namespace

double measure_expert_read_mbs(const Model& m, storage::IoMode io_mode, int queue_depth, double seconds) {
  const ModelConfig& c = m.config();
  if (queue_depth < 1 || queue_depth > 255) throw Error(strfmt("disk probe: queue depth %d out of 1..255", queue_depth));
  auto file = io_mode == storage::IoMode::naive ? storage::open_buffered(m.path()) : storage::open_direct(m.path());
  storage::IoOptions io;
  io.queue_depth = queue_depth;
  auto eng = storage::make_io_engine(io_mode, file, io);
  ExpertLayout layout(m, file->alignment());
  std::vector<storage::AlignedBuffer> bufs;
  for (int i = 0; i < queue_depth; ++i) bufs.emplace_back(layout.slot_bytes());
  std::mt19937 rng(7);
  uint64_t tag = 1;
  auto submit = [&](int slot) {
    const int l = static_cast<int>(rng() % static_cast<uint32_t>(c.n_layer));
    const int e = static_cast<int>(rng() % static_cast<uint32_t>(c.n_expert));
    storage::IoRequest r;
    r.tag = (tag++ << 8) | static_cast<uint64_t>(slot);
    for (const SlotRead& sr : layout.reads(l, e)) {
      r.ops.push_back({sr.file_offset, sr.length, bufs[static_cast<size_t>(slot)].data() + sr.slot_offset});
    }
    eng->submit(std::move(r));
  };
  for (int i = 0; i < queue_depth; ++i) submit(i);
  std::vector<storage::IoCompletion> done;
  uint64_t done_bytes = 0;
  const double t0 = now_s();
  while (now_s() - t0 < seconds) {
    done.clear();
    eng->wait(done, std::chrono::microseconds(100000));
    for (const auto& d : done) {
      if (!d.ok()) throw Error(strfmt("disk probe: a read of %s failed", m.path().c_str()));
      done_bytes += d.bytes;
      submit(static_cast<int>(d.tag & 0xff));
    }
  }
  const double secs = now_s() - t0;
  while (eng->pending()) {
    done.clear();
    eng->wait(done, std::chrono::microseconds(100000));
  }
  return static_cast<double>(done_bytes) / 1e6 / secs;
}

}  // namespace les::bench
