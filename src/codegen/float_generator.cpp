// The float-weight matmul kernel generator (xbyak): F16, BF16 and F32
// weights (target/packed_float.h) on f32 activations, for every ISA, epilogue
// and register tile: the GEMV, the batch kernel and the prefill GEMM are this
// one code shape with different tiles.
//
// A call walks token chunks whose activations fit in L2 (outer), row tiles,
// then token tiles (inner), as the Q8_0 kernels do. A register tile holds `pc`
// packed 16-row groups x `tc` tokens, one fp32 accumulator per (group, vector,
// token). Per column k it widens each group's 16 weights to fp32 once
// (vcvtph2ps; BF16: vpmovzxwd + vpslld 16; F32: a load), then for every token
// acc = fma(w, x[k], acc) with x[k] broadcast from memory ({1to16} on zmm, a
// vbroadcastss into one register on ymm). Each accumulator sees k in order
// from 0 whatever the tile, so a batch or prefill tile's row for a token is
// the GEMV's bit for bit. The epilogue is the other generators'
// (epilogue_generator.h).
#include <xbyak/xbyak.h>

#include <algorithm>
#include <vector>

#include "epilogue_generator.h"
#include "lumen/codegen/float_kernel.h"
#include "lumen/common/internal_error.h"
#include "lumen/target/kernel_registers.h"
#include "lumen/target/packed_float.h"

namespace lumen::codegen {
namespace {

using namespace detail;
using namespace Xbyak;
using namespace Xbyak::util;
using ops::DType;
using program::Epilogue;
using program::KernelKind;

// Stack frame (bytes from rsp).
constexpr int kMg = 0, kNt = 8, kGroupsTotal = 16, kGroupStride = 24, kTileStride = 32, kKEnd = 40,
              kXStrideBytes = 48, kChunk = 56, kChunkStart = 64, kChunkEnd = 72, kFrameBytes = 80;
// Columns per k-loop iteration (K is a multiple of 32).
constexpr int kUnroll = 8;

int mult_of(Epilogue e) { return e == Epilogue::SiluMul ? 2 : 1; }

class FloatGenerator : public EpilogueGenerator {
 public:
  FloatGenerator(Isa isa, DType format, Epilogue epi, const KernelShape& shape)
      : EpilogueGenerator(isa, epi, kMg, kNt), format_(format), shape_(shape) {
    mult_ = mult_of(epi);
    e_ = int(float_element_bytes(format));
    LUMEN_ASSERT(is_float_format(format), "float kernel: not a float format");
    LUMEN_ASSERT(float_tile_fits(isa, shape.groups * mult_, shape.tokens),
                 "float kernel shape does not fit the register file");
    generate();
  }

 private:
  // Accumulators first (those of the widest body), then the widened weights
  // of one column, then (ymm) the broadcast activation; the epilogue's 4
  // temporaries overlay the weights.
  int max_acc() const { return int(shape_.groups * mult_ * halves_ * shape_.tokens); }
  int acc_index(int tc, int i, int h, int t) const { return (i * halves_ + h) * tc + t; }
  Xmm acc(int tc, int i, int h, int t) const { return vec(acc_index(tc, i, h, t)); }
  Xmm wreg(int i, int h) const { return vec(max_acc() + i * halves_ + h); }
  Xmm xreg(int pc) const { return vec(max_acc() + pc * halves_); }
  int vec_bytes() const { return zmm_ ? 64 : 32; }
  int column_bytes() const { return int(kPackRows) * e_; }  // 16 rows of one column

  const Reg64 pointer_regs_[kTilePointerRegs] = {r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15, rsi, rdx};
  const Reg64* group_ptr_ = pointer_regs_;
  const Reg64* token_ptr_ = pointer_regs_ + 4;
  const Reg64& args_ = rdi;
  const Reg64& woff_ = rax;  // byte offset of the column in each group
  const Reg64& xoff_ = rcx;  // byte offset of the column in each token's row

  void generate() {
    const Reg64 callee_saved[] = {rbx, rbp, r12, r13, r14, r15};
    for (const Reg64& r : callee_saved) push(r);
    sub(rsp, kFrameBytes);
    Label done;

    mov(rax, qword[args_ + kArgMRows]);
    test(rax, rax);
    jle(done, T_NEAR);
    cmp(qword[args_ + kArgNTokens], 0);
    jle(done, T_NEAR);
    add(rax, kPackRows - 1);
    shr(rax, 4);
    mov(qword[rsp + kGroupsTotal], rax);
    mov(rax, qword[args_ + kArgKBlocks]);
    imul(rcx, rax, int(kQ8Block) * column_bytes());
    mov(qword[rsp + kGroupStride], rcx);
    imul(rcx, rcx, mult_);
    mov(qword[rsp + kTileStride], rcx);
    imul(rcx, rax, int(kQ8Block) * 4);
    mov(qword[rsp + kKEnd], rcx);
    mov(rcx, qword[args_ + kArgXStride]);
    shl(rcx, 2);
    mov(qword[rsp + kXStrideBytes], rcx);
    detail::emit_chunked_tile_loop(*this, int(shape_.groups), int(shape_.tokens), shape_.chunk_act_bytes,
                                   {kMg, kNt, kGroupsTotal, kKEnd, kChunk, kChunkStart, kChunkEnd},
                                   [this](int gc, int tc) { tile_body(gc, tc); });

    L(done);
    vzeroupper();
    add(rsp, kFrameBytes);
    for (int i = 5; i >= 0; --i) pop(callee_saved[i]);
    ret();
    emit_epilogue_constants();
  }

  void tile_body(int gc, int tc) {
    const int pc = gc * mult_;
    token_ptr_ = pointer_regs_ + pc;
    detail::emit_tile_pointers(*this, group_ptr_, pc, token_ptr_, tc, kMg, kNt, kTileStride, kGroupStride, kXStrideBytes);
    for (int i = 0; i < pc; ++i)
      for (int h = 0; h < halves_; ++h)
        for (int t = 0; t < tc; ++t) zmm_ ? vpxord(acc(tc, i, h, t), acc(tc, i, h, t), acc(tc, i, h, t))
                                          : vpxor(acc(tc, i, h, t), acc(tc, i, h, t), acc(tc, i, h, t));
    Label k_loop, k_done;
    xor_(woff_, woff_);
    xor_(xoff_, xoff_);
    cmp(xoff_, qword[rsp + kKEnd]);
    jae(k_done, T_NEAR);
    L(k_loop);
    const int step_bytes = kUnroll * column_bytes();
    if (shape_.prefetch_bytes > 0) {
      for (int i = 0; i < pc; ++i)
        for (int line = 0; line < step_bytes; line += 64)
          prefetcht0(ptr[group_ptr_[i] + woff_ + int(shape_.prefetch_bytes) + line]);
    }
    for (int c = 0; c < kUnroll; ++c) column(pc, tc, c);
    add(woff_, step_bytes);
    add(xoff_, kUnroll * 4);
    cmp(xoff_, qword[rsp + kKEnd]);
    jb(k_loop, T_NEAR);
    L(k_done);
    store_tile(
        gc, tc, [&](int p, int h, int t) { return acc(tc, p, h, t); },
        {vec(max_acc()), vec(max_acc() + 1), vec(max_acc() + 2), vec(max_acc() + 3)});
  }

  // Column c of the iteration: every group's weights widened, then one FMA
  // per accumulator.
  void column(int pc, int tc, int c) {
    for (int i = 0; i < pc; ++i) {
      for (int h = 0; h < halves_; ++h) {
        const Xmm w = wreg(i, h);
        const int off = c * column_bytes() + h * (vec_bytes() / 4) * e_;
        const Address src = ptr[group_ptr_[i] + woff_ + off];
        switch (format_) {
          case DType::F16: vcvtph2ps(w, src); break;
          case DType::BF16:
            vpmovzxwd(w, src);
            vpslld(w, w, 16);
            break;
          default: vmovups(w, src); break;
        }
      }
    }
    for (int t = 0; t < tc; ++t) {
      const int xo = 4 * c;
      if (!zmm_) vbroadcastss(xreg(pc), ptr[token_ptr_[t] + xoff_ + xo]);
      for (int i = 0; i < pc; ++i) {
        for (int h = 0; h < halves_; ++h) {
          if (zmm_) {
            vfmadd231ps(acc(tc, i, h, t), wreg(i, h), ptr_b[token_ptr_[t] + xoff_ + xo]);
          } else {
            vfmadd231ps(acc(tc, i, h, t), wreg(i, h), xreg(pc));
          }
        }
      }
    }
  }

  DType format_;
  KernelShape shape_;
  int mult_ = 1;
  int e_ = 2;
};

}  // namespace

bool is_float_kernel(const program::KernelId& kernel) { return is_float_format(kernel.weight); }

KernelShape float_kernel_shape(Isa isa, const program::KernelId& kernel, CpuTune tune) {
  LUMEN_ASSERT(is_float_kernel(kernel), "no float kernel " + program::to_string(kernel));
  std::string why;
  LUMEN_ASSERT(program::fits(kernel, isa, &why), "kernel " + program::to_string(kernel) + ": " + why);
  const int64_t mult = mult_of(kernel.epilogue);
  KernelShape shape;
  if (kernel.kind == KernelKind::Gemm) {
    // The id's tile, which the schedule picked to fit; its weights are
    // re-read from cache by every token tile after the first: no prefetch.
    shape.groups = kernel.tile_m / kPackRows;
    shape.tokens = kernel.tile_n;
    return shape;
  }
  // Eight columns' lines (one iteration) per stream, 8 iterations ahead.
  shape.prefetch_bytes = 8 * kUnroll * kPackRows * float_element_bytes(kernel.weight);
  if (kernel.kind == KernelKind::Gemv) {
    if (gemv_prefetch(tune, isa, kernel.weight) == WeightPrefetch::None) shape.prefetch_bytes = 0;
    // The Q8_0 GEMV's streams: 4 packed groups on zmm, 2 on ymm (two halves each).
    shape.groups = std::max<int64_t>(1, (is_ymm_isa(isa) ? 2 : 4) / mult);
    return shape;
  }
  // Batch: the most tokens (up to the batch size), then the most groups (up to 2 packed).
  int64_t best_t = 0;
  for (int64_t g = std::max<int64_t>(1, 2 / mult); g >= 1; --g) {
    int64_t tok = 0;
    while (tok < program::KernelId::kBatchMaxTokens && float_tile_fits(isa, g * mult, tok + 1)) ++tok;
    if (tok > best_t) {
      best_t = tok;
      shape.groups = g;
      shape.tokens = tok;
    }
  }
  LUMEN_ASSERT(best_t >= 1, "no float batch tile fits");
  return shape;
}

std::vector<uint8_t> generate_float_kernel(Isa isa, const program::KernelId& kernel, const KernelShape& shape) {
  LUMEN_ASSERT(is_float_kernel(kernel), "no float kernel " + program::to_string(kernel));
  FloatGenerator gen(isa, kernel.weight, kernel.epilogue, shape);
  const uint8_t* code = gen.getCode();
  return std::vector<uint8_t>(code, code + gen.getSize());
}

}  // namespace lumen::codegen
