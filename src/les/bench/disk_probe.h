// The disk's bandwidth for one model file's expert reads: random (layer, expert) reads exactly
// as the expert cache issues them (ExpertLayout's extents, widened to the file's alignment),
// queue_depth in flight, for about `seconds`. The measure behind every "ceiling" of the
// streaming benchmarks (t_io = bytes a token must read / this bandwidth).
#pragma once

#include "les/model/model.h"
#include "les/storage/io.h"

namespace les::bench {

// MB/s (1e6 bytes) of expert bytes delivered. io naive opens the file buffered, the others with
// O_DIRECT. Throws les::Error when the file cannot be opened or a read fails.
double measure_expert_read_mbs(const Model& model, storage::IoMode io, int queue_depth, double seconds);

}  // namespace les::bench
