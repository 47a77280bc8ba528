// The tunings of cpu_tune.h and which one this CPU takes.
#include "lumen/target/cpu_tune.h"

#include "lumen/target/packed_4bit.h"

#include <cpuid.h>

#include <cstdlib>
#include <cstring>
#include <stdexcept>

namespace lumen {
namespace {

struct TuneRow {
  CpuTune tune;
  const char* name;
  WeightPrefetch zmm_q8_0_gemv_prefetch;
  WeightPrefetch ymm_q8_0_gemv_prefetch;
  WeightPrefetch nibble_gemv_prefetch;
  WeightPrefetch gemv_prefetch;
  WeightPrefetch zmm_q8_0_batch_prefetch;
  WeightPrefetch batch_prefetch;
  bool one_stream;
};
constexpr TuneRow kTunes[] = {
#define LUMEN_CPU_TUNE_ROW(e, name, zmm_q8_0_gemv, ymm_q8_0_gemv, nibble_gemv, gemv, zmm_q8_0_batch, batch,      \
                           one_stream)                                                                         \
  {CpuTune::e,          name, WeightPrefetch::zmm_q8_0_gemv, WeightPrefetch::ymm_q8_0_gemv,                      \
   WeightPrefetch::nibble_gemv, WeightPrefetch::gemv, WeightPrefetch::zmm_q8_0_batch, WeightPrefetch::batch,     \
   one_stream},
    LUMEN_CPU_TUNES(LUMEN_CPU_TUNE_ROW)
#undef LUMEN_CPU_TUNE_ROW
};
// Only the 32-wide formats' generator (Q8_0 and the 4- and 5-bit formats) has
// the next-tile prefetch.
static_assert([] {
  for (const TuneRow& r : kTunes)
    if (r.gemv_prefetch == WeightPrefetch::NextTile) return false;
  return true;
}());

const TuneRow& row(CpuTune tune) { return kTunes[static_cast<size_t>(tune)]; }

CpuTune detect_tune() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(0, &eax, &ebx, &ecx, &edx)) return CpuTune::Generic;
  char vendor[13] = {};
  std::memcpy(vendor, &ebx, 4);
  std::memcpy(vendor + 4, &edx, 4);
  std::memcpy(vendor + 8, &ecx, 4);
  const unsigned max_leaf = eax;
  if (std::strcmp(vendor, "AuthenticAMD") != 0 || max_leaf < 7) return CpuTune::Generic;
  __get_cpuid(1, &eax, &ebx, &ecx, &edx);
  const unsigned family = ((eax >> 8) & 0xF) + ((eax >> 20) & 0xFF);
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  const bool avx512f = ebx & (1u << 16);
  // Family 19h is Zen 3 and Zen 4; of the two only Zen 4 has AVX-512.
  if (family == 0x19 && avx512f) return CpuTune::Zen4;
  return family == 0x1A ? CpuTune::Zen5 : CpuTune::Generic;
}

CpuTune host_tune_or_override() {
  const char* name = std::getenv("LUMEN_CPU_TUNE");
  if (name == nullptr || *name == '\0') return detect_tune();
  if (const std::optional<CpuTune> tune = parse_cpu_tune(name)) return *tune;
  throw std::runtime_error(std::string("LUMEN_CPU_TUNE='") + name + "' is not one of " + cpu_tune_names());
}

}  // namespace

const char* to_string(CpuTune tune) { return row(tune).name; }

std::optional<CpuTune> parse_cpu_tune(std::string_view name) {
  for (const TuneRow& r : kTunes)
    if (name == r.name) return r.tune;
  return std::nullopt;
}

std::string cpu_tune_names() {
  std::string names;
  for (const TuneRow& r : kTunes) names.append(names.empty() ? "" : ", ").append(r.name);
  return names;
}

WeightPrefetch gemv_prefetch(CpuTune tune, Isa isa, ops::DType format) {
  if (format == ops::DType::Q8_0) return is_ymm_isa(isa) ? row(tune).ymm_q8_0_gemv_prefetch : row(tune).zmm_q8_0_gemv_prefetch;
  return is_packed_4bit(format) ? row(tune).nibble_gemv_prefetch : row(tune).gemv_prefetch;
}
WeightPrefetch batch_prefetch(CpuTune tune, Isa isa, ops::DType format) {
  if (format != ops::DType::Q8_0 && !is_packed_4bit(format)) return WeightPrefetch::BlocksAhead;
  return format == ops::DType::Q8_0 && !is_ymm_isa(isa) ? row(tune).zmm_q8_0_batch_prefetch : row(tune).batch_prefetch;
}

bool one_stream(CpuTune tune) { return row(tune).one_stream; }

CpuTune host_cpu_tune() {
  static const CpuTune tune = host_tune_or_override();
  return tune;
}

}  // namespace lumen
