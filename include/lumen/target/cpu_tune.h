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

// How a kernel prefetches its weight streams in software: not at all, 4
// blocks ahead on each stream, or each block of the next register tile's rows
// (one tile ahead: the distance follows K at run time).
enum class WeightPrefetch : uint8_t { None, BlocksAhead, NextTile };

//   X(enumerator, name, zmm_q8_0_gemv, ymm_q8_0_gemv, nibble_gemv, gemv, zmm_q8_0_batch, batch, one_stream)
// The GEMVs' (decode, N = 1) prefetch per kind of format: Q8_0 on the zmm
// and on the ymm ISAs; the 32-wide 4- and 5-bit formats (packed_4bit.h); the
// k-quants and float formats (None or BlocksAhead: only the 32-wide
// formats' generator has NextTile).
// - generic prefetches ahead: end to end decode gained 4-5% at 1 and 2
//   threads on an Intel Xeon (family 6 model 207).
// - zen4 does not: there every GEMV streamed 25-45% more GB/s without, at
//   every distance tried, and tg64 at 1 thread rose 1.2-1.5x.
// - zen5 prefetches the next tile in the 4- and 5-bit GEMVs, whose 896-wide
//   shapes (a group's stream is 9-11 KB, a sixth of its length at K = 4864)
//   streamed 10-25% more GB/s than 4 blocks ahead and 40-60% more than
//   without, and in the ymm Q8_0 GEMV (35-37 GB/s against 18-31 ahead). The
//   zmm Q8_0 GEMV goes without (tg64 of a Q8_0 file +2-4% in three
//   alternated rounds); the k-quant and F16 GEMVs lose 5-17% without.
// The batch kernels' (N = 2-8) of the 32-wide formats: Q8_0's on the zmm
// ISAs, and the others (the 4- and 5-bit ones, Q8_0's on the ymm ISAs); the
// k-quants' and float formats' always prefetch ahead.
// - zen4 drops the zmm Q8_0 ones' (a verify pass of 4 drafts 1.36-1.48x a
//   decode step instead of 1.68x) and keeps the others', without which they
//   were slower there (4-bit files, and AVX2).
// - zen5 prefetches the next tile in all of them: a verify pass of 4 drafts
//   went from 1.31x a decode step to 1.15-1.16x (Q8_0), 1.39-1.47x to
//   1.17-1.20x (Q4_K_M) and, on the AVX2 kernels, 1.29-1.31x to 1.08-1.10x.
// one_stream: a quantized GEMV's register tile, and a 32-wide format's batch
// kernel's, streams one packed row group, and a SiluMul pair's gate group and
// then its up group (adjacent in memory), so that a tile reads one contiguous
// run of the packed weights; otherwise as many groups side by side as the
// accumulators allow (GEMV: 4 on the zmm ISAs, 2 on the ymm ones, halved for
// SiluMul). The float kernels and the k-quant batch kernels keep theirs.
// - zen5 streams one: the 32-wide formats' GEMVs went from 78-94% of the
//   read bandwidth to 97-111% on the shapes without SiluMul (zmm and ymm
//   alike), SiluMul's (gate's blocks, then up's) 3-10% more on the zmm ISAs;
//   Q6_K's +6-15%, Q4_K's and Q5_K's within noise; F16's lost 2-34% (so
//   the float formats are left out). Decode +6-20% end to end. With the
//   batch kernels too, a verify pass of 4 drafts ran 1.13-1.24x as many
//   passes/s on a Q8_0 file and 0.95-1.09x on Q4_K_M.
#define LUMEN_CPU_TUNES(X)                                                                              \
  X(Generic, "generic", BlocksAhead, BlocksAhead, BlocksAhead, BlocksAhead, BlocksAhead, BlocksAhead, false) \
  X(Zen4, "zen4", None, None, None, None, None, BlocksAhead, false)                                       \
  X(Zen5, "zen5", None, NextTile, NextTile, BlocksAhead, NextTile, NextTile, true)

enum class CpuTune : uint8_t {
#define LUMEN_CPU_TUNE_ENUM(e, name, zmm_q8_0_gemv, ymm_q8_0_gemv, nibble_gemv, gemv, zmm_q8_0_batch, batch, one_stream) e,
  LUMEN_CPU_TUNES(LUMEN_CPU_TUNE_ENUM)
#undef LUMEN_CPU_TUNE_ENUM
};

inline constexpr CpuTune kCpuTunes[] = {
#define LUMEN_CPU_TUNE_ITEM(e, name, zmm_q8_0_gemv, ymm_q8_0_gemv, nibble_gemv, gemv, zmm_q8_0_batch, batch, one_stream) \
  CpuTune::e,
    LUMEN_CPU_TUNES(LUMEN_CPU_TUNE_ITEM)
#undef LUMEN_CPU_TUNE_ITEM
};

const char* to_string(CpuTune tune);                      // "generic", "zen4", ...
std::optional<CpuTune> parse_cpu_tune(std::string_view name);
std::string cpu_tune_names();                             // "generic, zen4, zen5"
// How the GEMVs of packed `format` on `isa` prefetch under the tuning.
WeightPrefetch gemv_prefetch(CpuTune tune, Isa isa, ops::DType format);
// How the batch kernels of packed `format` on `isa` prefetch under the
// tuning (the k-quants' and float formats': always BlocksAhead).
WeightPrefetch batch_prefetch(CpuTune tune, Isa isa, ops::DType format);
// Whether the quantized GEMVs and 32-wide batch kernels stream one packed
// group at a time (above).
bool one_stream(CpuTune tune);

// The tuning for this CPU (cpuid: AMD family 19h with AVX-512 is Zen 4,
// family 1Ah Zen 5; any other CPU is generic). LUMEN_CPU_TUNE=NAME overrides it (to compare two
// tunings with one binary); an unknown name throws std::runtime_error.
// LUMEN_MAX_CPU_ISA does not change it: the memory system stays the host's.
CpuTune host_cpu_tune();

}  // namespace lumen
