// Decode speed under a memory budget, predicted from one short calibration run.
//
// A decoded token costs its compute (t_c: the products, attention, everything but waiting for
// expert reads) plus what the lookahead could not hide of its expert reads:
//
//     T(b) = t_c + max(0, t_io(b) - h * t_c),   t_io(b) = R(b) / r
//
// R(b): expert bytes read per token at budget b: the misses of the recorded routing replayed
//   through a cache of b's slots (cache/replay.h, the engine's default policy), times the bytes of
//   an expert, times the read overhead the calibration run measured over its own replay (wrong
//   guesses read and never used);
// r: the rate the calibration's reads achieved while the disk was busy (its I/O engine's bytes
//   over busy time; the device probe's loaded rate when it read nothing);
// h: the share of the compute that reads can hide behind, fitted to the calibration's stall
//   (clamped to [0, 1]: reads the calibration hid completely give h >= their share).
//
// So at the calibration's own budget the model gives back what was measured, and it moves from
// there along the replayed misses. A mixed-precision file at another bits per weight scales the
// expert bytes (more slots in the same cache, fewer bytes per miss) and the experts' share of t_c.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "les/cache/trace.h"

namespace les::plan {

// What the calibration run measured (decode phase: after the first generated token).
struct Calibration {
  int tokens = 0;                 // decoded tokens measured
  double seconds = 0;             // their wall time
  double stall_s = 0;             // waiting for expert reads inside layers
  double expert_compute_s = 0;    // computing routed experts
  uint64_t bytes_read = 0;        // expert bytes read (demand + prefetch)
  uint64_t io_bytes = 0;          // the I/O engine's bytes and busy time (its achieved rate)
  double io_busy_s = 0;
  uint64_t cache_slots = 0;       // the calibration budget's expert slots
  double probe_loaded_mbs = 0;    // the device probe's rate while the cores compute (fallback for r)
  double probe_idle_mbs = 0;      // ... and with idle cores (the two-rate ceiling)
};

struct SpeedModel {
  double t_compute = 0;           // t_c, seconds per token
  double t_expert = 0;            // the routed experts' share of t_c
  double read_rate = 0;           // r, bytes per second
  double hide = 0;                // h
  double read_overhead = 1;       // bytes read / (replayed misses x expert bytes) at calibration
  double probe_loaded_mbs = 0, probe_idle_mbs = 0;  // the device probe's rates (the ceiling)
  double expert_bytes = 0;        // one expert, averaged over the expert layers
  int n_slots_total = 0;          // (layer, expert) keys: a cache of this many holds every expert
  cache::RoutingTrace trace;      // the calibration's routing: the prompt's, then one token per decode step
  int lead_tokens = 0;            // the trace's first tokens that hold the prompt's experts (not decoded)
};

struct SpeedAt {
  uint64_t slots = 0;
  // Steady state (a long generation, the cache warm):
  double misses_per_token = 0;    // replayed
  double mb_per_token = 0;        // predicted reads
  double t_io = 0, stall = 0;     // seconds per token
  double steady_tok_s = 0;
  double ceiling_tok_s = 0;       // the two-rate bound: the reads beside the compute at the probe's loaded
                                  // rate, the rest after it at its idle rate (decode_ceiling_seconds)
  bool disk_bound = false;        // stall is more than 5% of the token's time
  // A generation of gen_tokens tokens after the prompt, from a cold cache as les run starts: the
  // calibration's own first tokens replayed, then the steady state.
  int gen_tokens = 0;
  double tok_s = 0;
};

// The steady-state demand misses per decoded token of `trace` through a cache of `slots` experts
// (the engine's eviction policy without predictions, a layer's selected experts in use together):
// the lead tokens (the prompt) and the first half of the decoded ones warm the cache, the second
// half is counted.
double replay_misses_per_token(const cache::RoutingTrace& trace, int lead_tokens, uint64_t slots);

// Fits the model to a calibration (throws les::Error when it decoded no tokens). trace: the
// calibration's routing, its first lead_tokens tokens the prompt's experts.
SpeedModel fit_speed_model(const Calibration& cal, cache::RoutingTrace trace, int lead_tokens, double expert_bytes,
                           int n_slots_total);

// The prediction for a cache of `slots` experts and a generation of gen_tokens tokens; scale:
// expert bytes relative to the calibrated file's (a file at other bits per weight), which also
// scales the experts' compute.
SpeedAt predict(const SpeedModel& m, uint64_t slots, int gen_tokens, double scale = 1.0);

// The smallest cache (in slots) at which reads hide behind compute (no stall), or 0 when even a
// cache of every expert stalls (cold misses of the replayed routing).
uint64_t compute_bound_slots(const SpeedModel& m, double scale = 1.0);

}  // namespace les::plan
