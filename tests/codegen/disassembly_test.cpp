// Disassembly spot check: the AVX-512 VNNI kernels really use zmm registers
// and vpdpbusd, the AVX-512 ones zmm without VNNI, the AVX2 ones neither; and
// the Q5_0 kernels' fifth-bit expansion per ISA.
// Uses binutils' objdump; skipped when it is not installed.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>

#include "lumen/codegen/codegen.h"

namespace lumen::codegen {
namespace {

std::string disassemble(const std::vector<uint8_t>& code) {
  char path[] = "/tmp/lumen_kernel_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "";
  close(fd);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(code.data()), std::streamsize(code.size()));
  const std::string cmd = std::string("objdump -D -b binary -m i386:x86-64 ") + path + " 2>/dev/null";
  std::string text;
  if (FILE* pipe = popen(cmd.c_str(), "r")) {
    char buf[4096];
    size_t got;
    while ((got = fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, got);
    pclose(pipe);
  }
  std::remove(path);
  return text;
}

TEST(Disassembly, KernelsUseTheirIsa) {
  const std::string probe = disassemble({0xC3});
  if (probe.find("ret") == std::string::npos) GTEST_SKIP() << "objdump not available";
  // The GEMM tile is one every ISA's registers hold.
  for (const program::KernelId& kernel :
       {program::KernelId::gemv(program::Epilogue::None), program::KernelId::gemm(program::Epilogue::SiluMul, 16, 2)}) {
    const std::string name = to_string(kernel);
    const std::string vnni = disassemble(generate_matmul_kernel(Isa::Avx512Vnni, kernel));
    EXPECT_NE(vnni.find("vpdpbusd"), std::string::npos) << name;
    EXPECT_NE(vnni.find("zmm"), std::string::npos) << name;
    const std::string avx512 = disassemble(generate_matmul_kernel(Isa::Avx512, kernel));
    EXPECT_EQ(avx512.find("vpdpbusd"), std::string::npos) << name;
    EXPECT_NE(avx512.find("vpmaddubsw"), std::string::npos) << name;
    EXPECT_NE(avx512.find("zmm"), std::string::npos) << name;
    const std::string avx2 = disassemble(generate_matmul_kernel(Isa::Avx2, kernel));
    EXPECT_EQ(avx2.find("zmm"), std::string::npos) << name;
    EXPECT_EQ(avx2.find("vpdpbusd"), std::string::npos) << name;
    EXPECT_EQ(avx2.find("{k"), std::string::npos) << name;  // no EVEX masking
    EXPECT_NE(avx2.find("vpsignb"), std::string::npos) << name;
    // AVX-VNNI: VEX vpdpbusd on ymm (objdump marks the VEX form "{vex}"), no zmm, no masks.
    const std::string avx_vnni = disassemble(generate_matmul_kernel(Isa::AvxVnni, kernel));
    EXPECT_NE(avx_vnni.find("{vex} vpdpbusd"), std::string::npos) << name;
    EXPECT_NE(avx_vnni.find("ymm"), std::string::npos) << name;
    EXPECT_EQ(avx_vnni.find("zmm"), std::string::npos) << name;
    EXPECT_EQ(avx_vnni.find("{k"), std::string::npos) << name;
    EXPECT_EQ(avx_vnni.find("vpmaddubsw"), std::string::npos) << name;
  }
}

// The Q5_0 kernels: AVX-512 takes the fifth bits as a kmovq mask, the ymm
// ISAs expand them with vpshufb (no zmm, no masks there).
TEST(Disassembly, Q5_0KernelsUseTheirIsa) {
  const std::string probe = disassemble({0xC3});
  if (probe.find("ret") == std::string::npos) GTEST_SKIP() << "objdump not available";
  for (const program::KernelId& kernel : {program::KernelId::gemv(program::Epilogue::None, ops::DType::Q5_0),
                                          program::KernelId::batch(program::Epilogue::SiluMul, ops::DType::Q5_0)}) {
    const std::string name = to_string(kernel);
    const std::string vnni = disassemble(generate_matmul_kernel(Isa::Avx512Vnni, kernel));
    EXPECT_NE(vnni.find("vpdpbusd"), std::string::npos) << name;
    EXPECT_NE(vnni.find("kmovq"), std::string::npos) << name;
    EXPECT_NE(vnni.find("zmm"), std::string::npos) << name;
    const std::string avx512 = disassemble(generate_matmul_kernel(Isa::Avx512, kernel));
    EXPECT_EQ(avx512.find("vpdpbusd"), std::string::npos) << name;
    EXPECT_NE(avx512.find("vpmaddubsw"), std::string::npos) << name;
    EXPECT_NE(avx512.find("kmovq"), std::string::npos) << name;
    for (Isa isa : {Isa::Avx2, Isa::AvxVnni}) {
      const std::string ymm = disassemble(generate_matmul_kernel(isa, kernel));
      EXPECT_EQ(ymm.find("zmm"), std::string::npos) << name;
      EXPECT_EQ(ymm.find("{k"), std::string::npos) << name;
      EXPECT_NE(ymm.find("vpshufb"), std::string::npos) << name;
      EXPECT_EQ(ymm.find("vpdpbusd") == std::string::npos, isa == Isa::Avx2) << name;
    }
  }
}

}  // namespace
}  // namespace lumen::codegen
