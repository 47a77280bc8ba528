// The instruction-set targets Lumen generates code for, and the CPU features
// that decide which of them a machine can run. Both the compiler (which ISA a
// model.so is built for) and the runtime (whether this CPU can run it) read it.
#pragma once

#include <cstdint>
#include <string>

namespace lumen {

enum CpuFeature : uint64_t {
  kCpuAvx2 = 1u << 0,
  kCpuFma = 1u << 1,
  kCpuF16c = 1u << 2,
  kCpuAvx512f = 1u << 3,
  kCpuAvx512bw = 1u << 4,
  kCpuAvx512vl = 1u << 5,
  kCpuAvx512vnni = 1u << 6,
  kCpuAvxVnni = 1u << 7,
};
// Of this CPU (cpuid + xgetbv), capped by LUMEN_MAX_CPU_ISA when it is set.
uint64_t cpu_features();
std::string cpu_feature_names(uint64_t mask);    // "avx512f avx512_vnni"

// Code-generation targets, from most to least capable.
// AvxVnni is AVX2 plus the VEX-encoded vpdpbusd on ymm (Intel client CPUs
// since Alder Lake, which have no AVX-512).
enum class Isa : uint8_t { Avx512Vnni, Avx512, AvxVnni, Avx2 };
inline constexpr Isa kAllIsas[] = {Isa::Avx512Vnni, Isa::Avx512, Isa::AvxVnni, Isa::Avx2};
const char* to_string(Isa isa);                  // "avx512-vnni", "avx512", "avx-vnni", "avx2"
uint64_t required_features(Isa isa);
// Kernels on 16 ymm registers (AVX2, AVX-VNNI), not 32 zmm.
inline constexpr bool is_ymm_isa(Isa isa) { return isa == Isa::AvxVnni || isa == Isa::Avx2; }
// Packed weights stored as w + 128 (u8) for vpdpbusd.
inline constexpr bool is_vnni_isa(Isa isa) { return isa == Isa::Avx512Vnni || isa == Isa::AvxVnni; }
Isa best_isa(uint64_t features);                 // throws if even AVX2+FMA+F16C is missing

}  // namespace lumen
