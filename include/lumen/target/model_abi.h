/* The C ABI that every model.so exports, versioned. lumenc writes it,
 * lumen-run reads it with dlopen. Keep this header C-compatible.
 * src/codegen/emit_model.cpp writes these structs from a list of their
 * fields that must follow every change here (it fails to compile if not). */
#ifndef LUMEN_MODEL_ABI_H
#define LUMEN_MODEL_ABI_H

#include <stdint.h>

#define LUMEN_MODEL_ABI_VERSION 2u /* 2: batch kernels */

/* lumen_kernel_entry::kind */
#define LUMEN_KERNEL_GEMV 1u  /* N == 1 */
#define LUMEN_KERNEL_GEMM 2u  /* N > 1 */
#define LUMEN_KERNEL_BATCH 3u /* 2 <= N <= 8 */

#ifdef __cplusplus
extern "C" {
#endif

struct lumen_kernel_entry {
  const char* name;          /* to_string(program::KernelId): "gemv.bias", "gemm.bias.m48n4" */
  const void* code;          /* position-independent machine code; entry at offset 0 */
  uint64_t code_size;
  uint32_t kind;             /* LUMEN_KERNEL_GEMV, LUMEN_KERNEL_GEMM or LUMEN_KERNEL_BATCH */
  uint32_t epilogue;         /* lumen::program::Epilogue */
};

struct lumen_model_abi {
  uint32_t abi_version;      /* LUMEN_MODEL_ABI_VERSION */
  uint32_t reserved;
  uint64_t required_cpu;     /* lumen::CpuFeature mask the kernels need */
  const char* target;        /* to_string(lumen::Isa): "avx512-vnni", "avx512", "avx-vnni", "avx2" */
  const char* arch;          /* general.architecture the program expects */
  const char* compiler;      /* "lumenc 0.1.0" */
  const char* program;       /* lumen::program::serialize() text */
  uint64_t program_size;
  uint32_t n_kernels;
  uint32_t reserved2;
  const struct lumen_kernel_entry* kernels;
};

/* Both are exported by model.so. The runtime calls lumen_model_abi_version()
 * first and refuses a mismatch before touching the rest. */
uint32_t lumen_model_abi_version(void);
const struct lumen_model_abi* lumen_model_get(void);

#ifdef __cplusplus
}
#endif

#endif
