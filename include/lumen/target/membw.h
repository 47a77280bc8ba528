// Memory read bandwidth probe: the yardstick the kernel benchmark and
// lumen-bench print beside their GB/s figures.
#pragma once

#include <cstddef>

namespace lumen {

// Reads a `bytes` buffer (touched first, so it is resident) with `threads`
// threads, each summing its contiguous slice with the widest vector loads the
// CPU has; returns the best of `repeats` passes in GB/s (1e9 bytes/s).
double measure_read_bandwidth(size_t bytes = size_t(1) << 30, int threads = 1, int repeats = 5);

// The same reads timed per `segment_bytes` slice (all threads in lockstep on
// their own slices): the best slice rate. On a shared machine a whole pass
// is usually preempted; a short slice often is not, so this is the figure to
// compare with kernels timed over similarly short batches.
double measure_read_bandwidth_best_segment(size_t bytes = size_t(1) << 30, int threads = 1, int repeats = 5,
                                           size_t segment_bytes = size_t(16) << 20);

}  // namespace lumen
