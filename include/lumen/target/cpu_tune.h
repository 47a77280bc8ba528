// What a model.so is tuned for beyond its ISA (lumenc's --tune, as a C
// compiler's -mtune beside -march): choices that change how fast the kernels
// run on a CPU, never what they compute. One row per tuning, and each value
// is a measurement (docs/performance.md, "Tuning per CPU").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "lumen/ops/op_list.h"
#include "lumen/target/isa.h"

namespace lumen {

//   X(enumerator, name, gemv_prefetch, zmm_q8_0_batch_prefetch)
// gemv_prefetch: the GEMVs (decode, N = 1) issue software prefetches ahead on
// every weight stream. generic keeps them: end to end decode gained 4-5% at 1
// and 2 threads on an Intel Xeon (family 6 model 207). zen4 drops them: there
// every GEMV streamed 25-45% more GB/s without, at every distance tried, and
// tg64 at 1 thread rose 1.2-1.5x.
// zmm_q8_0_batch_prefetch: the same for the Q8_0 batch kernels (N = 2-8) on
// the zmm ISAs. zen4 drops it too (a verify pass of 4 drafts 1.36-1.48x a
// decode step instead of 1.68x); every other batch kernel keeps its prefetch,
// without which it was slower there (4-bit and k-quant files, and AVX2).
#define LUMEN_CPU_TUNES(X)              \
  X(Generic, "generic", true, true)     \
  X(Zen4, "zen4", false, false)

enum class CpuTune : uint8_t {
#define LUMEN_CPU_TUNE_ENUM(e, name, gemv, batch) e,
  LUMEN_CPU_TUNES(LUMEN_CPU_TUNE_ENUM)
#undef LUMEN_CPU_TUNE_ENUM
};

const char* to_string(CpuTune tune);                      // "generic", "zen4"
std::optional<CpuTune> parse_cpu_tune(std::string_view name);
std::string cpu_tune_names();                             // "generic, zen4"
bool gemv_prefetch(CpuTune tune);
// Whether the batch kernels of packed `format` on `isa` prefetch their weight
// streams: all of them, but the zmm Q8_0 ones only where the tuning says so.
bool batch_prefetch(CpuTune tune, Isa isa, ops::DType format);

// The tuning for this CPU (cpuid: AMD family 19h with AVX-512 is Zen 4; any
// other CPU is generic). LUMEN_CPU_TUNE=NAME overrides it (to compare two
// tunings with one binary); an unknown name throws std::runtime_error.
// LUMEN_MAX_CPU_ISA does not change it: the memory system stays the host's.
CpuTune host_cpu_tune();

}  // namespace lumen
