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

// How a GEMV (decode, N = 1) prefetches its weight streams in software:
// not at all, 4 blocks ahead on each stream, or each block of the next
// register tile's rows (one tile ahead: the distance follows K at run time).
enum class GemvPrefetch : uint8_t { None, BlocksAhead, NextTile };

//   X(enumerator, name, q8_0_gemv_prefetch, nibble_gemv_prefetch, gemv_prefetch, zmm_q8_0_batch_prefetch)
// The GEMVs' prefetch per kind of format: Q8_0; the 32-wide 4- and 5-bit
// formats (packed_4bit.h); the k-quants and float formats (None or
// BlocksAhead: only the 32-wide formats' generator has NextTile).
// - generic prefetches ahead: end to end decode gained 4-5% at 1 and 2
//   threads on an Intel Xeon (family 6 model 207).
// - zen4 does not: there every GEMV streamed 25-45% more GB/s without, at
//   every distance tried, and tg64 at 1 thread rose 1.2-1.5x.
// - zen5 prefetches the 4- and 5-bit GEMVs' next tile: their 896-wide GEMVs
//   (a group's stream is 9-11 KB, a sixth of its length at K = 4864) streamed
//   10-25% more GB/s than 4 blocks ahead, and 40-60% more than without. Its
//   Q8_0 GEMV goes without (tg64 of a Q8_0 file +2-4% in three alternated
//   rounds); the k-quant and F16 GEMVs lose 10-15% without, so they keep it.
// zmm_q8_0_batch_prefetch: the Q8_0 batch kernels (N = 2-8) on the zmm ISAs
// prefetch 4 blocks ahead. zen4 drops it (a verify pass of 4 drafts 1.36-1.48x
// a decode step instead of 1.68x); every other batch kernel keeps its prefetch,
// without which it was slower there (4-bit and k-quant files, and AVX2).
#define LUMEN_CPU_TUNES(X)                                            \
  X(Generic, "generic", BlocksAhead, BlocksAhead, BlocksAhead, true)  \
  X(Zen4, "zen4", None, None, None, false)                            \
  X(Zen5, "zen5", None, NextTile, BlocksAhead, true)

enum class CpuTune : uint8_t {
#define LUMEN_CPU_TUNE_ENUM(e, name, q8_0_gemv, nibble_gemv, gemv, batch) e,
  LUMEN_CPU_TUNES(LUMEN_CPU_TUNE_ENUM)
#undef LUMEN_CPU_TUNE_ENUM
};

inline constexpr CpuTune kCpuTunes[] = {
#define LUMEN_CPU_TUNE_ITEM(e, name, q8_0_gemv, nibble_gemv, gemv, batch) CpuTune::e,
    LUMEN_CPU_TUNES(LUMEN_CPU_TUNE_ITEM)
#undef LUMEN_CPU_TUNE_ITEM
};

const char* to_string(CpuTune tune);                      // "generic", "zen4", ...
std::optional<CpuTune> parse_cpu_tune(std::string_view name);
std::string cpu_tune_names();                             // "generic, zen4, zen5"
// How the GEMVs of packed `format` prefetch under the tuning.
GemvPrefetch gemv_prefetch(CpuTune tune, ops::DType format);
// Whether the batch kernels of packed `format` on `isa` prefetch their weight
// streams: all of them, but the zmm Q8_0 ones only where the tuning says so.
bool batch_prefetch(CpuTune tune, Isa isa, ops::DType format);

// The tuning for this CPU (cpuid: AMD family 19h with AVX-512 is Zen 4,
// family 1Ah Zen 5; any other CPU is generic). LUMEN_CPU_TUNE=NAME overrides it (to compare two
// tunings with one binary); an unknown name throws std::runtime_error.
// LUMEN_MAX_CPU_ISA does not change it: the memory system stays the host's.
CpuTune host_cpu_tune();

}  // namespace lumen
