// The int8 dot-product peak of a core: the compute yardstick lumen-bench
// prints beside its prefill (pp) rows, as the read bandwidth (membw.h) is the
// yardstick of its decode (tg) rows.
#pragma once

#include "lumen/target/isa.h"

namespace lumen {

// Runs a register-only loop of independent int8 dot-product chains of `isa`'s
// matmul kernels (vpdpbusd on zmm or ymm; vpmaddubsw + vpmaddwd + vpaddd
// without VNNI) on `threads` threads at once, and returns the best of
// `repeats` timed passes of about `pass_ms` each (short passes: on a shared
// host some of them run unpreempted), in GOP/s: 2 ops per int8
// multiply-add, summed over the threads, the convention of the pp GOP/s
// figures. Throws std::invalid_argument if this CPU cannot run `isa`.
double measure_int8_peak(Isa isa, int threads = 1, int repeats = 20, double pass_ms = 5.0);

}  // namespace lumen
