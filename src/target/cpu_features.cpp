// CPU feature detection (cpuid + xgetbv) and the mapping from features to
// the code-generation targets of kernel_abi.h.
#include <cpuid.h>

#include <stdexcept>
#include <cstdlib>
#include <string>
#include <string_view>

#include "lumen/target/kernel_abi.h"

namespace lumen {
namespace {

// XCR0 says which register states the OS saves; a CPU flag without its
// state enabled is unusable.
uint64_t read_xcr0() {
  uint32_t eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (uint64_t(edx) << 32) | eax;
}

uint64_t detect_features() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return 0;
  const bool osxsave = ecx & (1u << 27);
  const bool fma = ecx & (1u << 12);
  const bool f16c = ecx & (1u << 29);
  if (!osxsave) return 0;
  const uint64_t xcr0 = read_xcr0();
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xE6) == 0xE6;
  if (!ymm_state) return 0;

  uint64_t features = 0;
  if (fma) features |= kCpuFma;
  if (f16c) features |= kCpuF16c;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  if (max_leaf < 7) return features;
  __cpuid_count(7, 0, eax, ebx, ecx, edx);
  if (ebx & (1u << 5)) features |= kCpuAvx2;
  if (zmm_state) {
    if (ebx & (1u << 16)) features |= kCpuAvx512f;
    if (ebx & (1u << 30)) features |= kCpuAvx512bw;
    if (ebx & (1u << 31)) features |= kCpuAvx512vl;
    if (ecx & (1u << 11)) features |= kCpuAvx512vnni;
  }
  __cpuid_count(7, 1, eax, ebx, ecx, edx);
  if (eax & (1u << 4)) features |= kCpuAvxVnni;
  return features;
}

}  // namespace

// LUMEN_MAX_CPU_ISA=avx2|avx-vnni|avx512|avx512-vnni caps the features reported, as
// oneDNN's ONEDNN_MAX_CPU_ISA does: it lets one machine run the code paths of
// an older CPU (and shows how a model.so for a newer one is refused).
static uint64_t capped_features() {
  uint64_t features = detect_features();
  const char* cap = std::getenv("LUMEN_MAX_CPU_ISA");
  if (cap == nullptr || *cap == '\0') return features;
  for (Isa isa : kAllIsas)
    if (std::string_view(cap) == to_string(isa)) return features & required_features(isa);
  throw std::runtime_error(std::string("LUMEN_MAX_CPU_ISA='") + cap +
                           "' is not one of avx512-vnni, avx512, avx-vnni, avx2");
}

uint64_t cpu_features() {
  static const uint64_t features = capped_features();
  return features;
}

std::string cpu_feature_names(uint64_t mask) {
  static const struct {
    uint64_t bit;
    const char* name;
  } kNames[] = {
      {kCpuAvx2, "avx2"},         {kCpuFma, "fma"},           {kCpuF16c, "f16c"},
      {kCpuAvx512f, "avx512f"},   {kCpuAvx512bw, "avx512bw"}, {kCpuAvx512vl, "avx512vl"},
      {kCpuAvx512vnni, "avx512_vnni"}, {kCpuAvxVnni, "avx_vnni"},
  };
  std::string out;
  for (const auto& n : kNames) {
    if (!(mask & n.bit)) continue;
    if (!out.empty()) out += ' ';
    out += n.name;
  }
  return out;
}

const char* to_string(Isa isa) {
  switch (isa) {
    case Isa::Avx512Vnni: return "avx512-vnni";
    case Isa::Avx512: return "avx512";
    case Isa::AvxVnni: return "avx-vnni";
    case Isa::Avx2: return "avx2";
  }
  return "unknown";
}

uint64_t required_features(Isa isa) {
  const uint64_t avx2 = kCpuAvx2 | kCpuFma | kCpuF16c;
  const uint64_t avx512 = avx2 | kCpuAvx512f | kCpuAvx512bw | kCpuAvx512vl;
  switch (isa) {
    case Isa::Avx512Vnni: return avx512 | kCpuAvx512vnni;
    case Isa::Avx512: return avx512;
    case Isa::AvxVnni: return avx2 | kCpuAvxVnni;
    case Isa::Avx2: return avx2;
  }
  return ~uint64_t(0);
}

Isa best_isa(uint64_t features) {
  for (Isa isa : kAllIsas) {
    const uint64_t need = required_features(isa);
    if ((features & need) == need) return isa;
  }
  throw std::runtime_error("this CPU lacks AVX2+FMA+F16C, the minimum Lumen kernels need (has: " +
                           cpu_feature_names(features) + ")");
}

}  // namespace lumen
