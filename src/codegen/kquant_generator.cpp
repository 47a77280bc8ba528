// The k-quant (Q2_K, Q3_K, Q4_K, Q5_K, Q6_K) GEMV and batch kernel generator (xbyak), on the
// packed layouts of target/packed_kquant.h, for every ISA and epilogue.
//
// A call walks output row tiles (outer) and token tiles (inner). A register
// tile holds `pc` packed 16-row groups x `tc` tokens and walks k one 32-block
// (sub-block) at a time:
//   int stage: the quants are u8 (Q2_K 0..3, Q3_K 0..7, Q4_K 0..15, Q5_K 0..31, Q6_K 0..63), so each 64-byte
//     vector is unpacked with masks and shifts to 2 x 4 (Q2_K, Q3_K: 4 or 8 x 4) consecutive k of 16
//     rows and multiplied by the activation dwords with vpdpbusd (VNNI) or
//     vpmaddubsw + vpmaddwd (no saturation: 63 * 128 * 2 < 32768). Q6_K's
//     values are q - 32 (Q3_K's q - 4) with a scale per 16: each of its two int accumulators
//     per 32-block starts at -32 (-4) * (sum of the 16 x), so it ends exact.
//     Q2_K has two as well (a scale per 16), starting at 0; per token and
//     32-block X_s = float(-(sum of the 16 qx of 16-block s)) * dx goes to the
//     stack for its min terms.
//   fp32 stage, per row and token, always in this order (the reference does
//     the same, and it does not depend on the tile, so a batch kernel's row of
//     token t is bit-identical to the GEMV's):
//     Q4_K, Q5_K: acc = fma(float(isum), (d * sc) * dx, acc);
//           acc = fma((dmin * m) * (1/128), float(ActBlock::sum) * dx, acc)
//           (ActBlock::sum = -128 * sum(qx), so this subtracts dmin*m*sum(x));
//     Q6_K, Q3_K: acc = fma(float(isum_s), (sc_s * d) * dx, acc) for s = 0, 1;
//     Q2_K: acc = fma(float(isum_s), (sc_s * d) * dx, acc) for s = 0, 1, then
//           acc = fma(m_s * dmin, X_s, acc) for s = 0, 1.
// Edge tiles (fewer groups or tokens) get their own bodies; rows past m_rows
// are never stored (masked stores). The epilogues are the Q8_0 kernels'.
//
// The prefill GEMM (KernelKind::Gemm) reads the expanded layout instead
// (packed_kquant.h expand_kquant, made once per task): u8 q ready for the dot
// products and the fp32 factors (d * sc, (dmin * m) * (1/128), Q6_K's sc * d,
// Q2_K's sc_s * d and m_s * dmin)
// as the stage above computes them, so the same operations in the same order
// give the same bits without the unpacking and scale set-up per token tile.
// Q3_K expands to Q6_K (q + 28, the same factors; the same ints since
// q - 4 = (q + 28) - 32) and runs Q6_K's GEMM.
// Q4_1 and Q5_1 (d * q + m) expand to Q4_K's two terms: factors d and
// m * (-1/128), their GEMV's (matmul_generator.cpp) fp32 stage; being
// 32-wide, their GEMM takes any k_blocks.
#include <xbyak/xbyak.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "epilogue_generator.h"
#include "lumen/codegen/kquant_kernel.h"
#include "lumen/common/internal_error.h"
#include "lumen/common/numeric.h"
#include "lumen/target/kernel_registers.h"
#include "lumen/target/packed_kquant.h"

namespace lumen::codegen {
namespace {

using ops::DType;
using program::Epilogue;
using program::KernelKind;
using namespace Xbyak;
using namespace Xbyak::util;

constexpr int kArgW = offsetof(MatMulArgs, w), kArgX = offsetof(MatMulArgs, x), kArgY = offsetof(MatMulArgs, y),
              kArgBias = offsetof(MatMulArgs, bias), kArgResidual = offsetof(MatMulArgs, residual),
              kArgXStride = offsetof(MatMulArgs, x_stride), kArgYStride = offsetof(MatMulArgs, y_stride),
              kArgRStride = offsetof(MatMulArgs, r_stride), kArgKBlocks = offsetof(MatMulArgs, k_blocks),
              kArgMRows = offsetof(MatMulArgs, m_rows), kArgNTokens = offsetof(MatMulArgs, n_tokens);
constexpr int kXD = offsetof(ActBlock, d), kXSum = offsetof(ActBlock, sum), kXQs = offsetof(ActBlock, qs);

// Stack frame (bytes from rsp); fp32 accumulator slots follow at kFloatAccs.
constexpr int kMg = 0, kNt = 8, kGroupsTotal = 16, kGroupStride = 24, kTileStride = 32, kKEnd = 40,
              kXStrideBytes = 48, kSavedRsp = 56, kFloatAccs = 64;
constexpr int kTemps = 4;  // vector temporaries above the accumulators

// 64-byte constants: SiLU's (as the Q8_0 kernels'), then the unpacking ones.
enum Const {
  kSignMask, kExpHi, kExpLo, kLog2e, kLn2Hi, kLn2Lo, kP0, kP1, kP2, kP3, kP4, kP5, kOne,
  kInv128, kNib, kHigh2, kBit4, kU8One, kI16One, kI16Minus32, kLow2, kBit2, kI16Minus4, kI16MinusOne, kNumConsts
};

int nsub(DType t) { return int(kquant_int_accumulators(t)); }
int mult_of(Epilogue e) { return e == Epilogue::SiluMul ? 2 : 1; }

bool tile_ok(Isa isa, DType t, int64_t packed_groups, int64_t tokens, bool fp_mem) {
  static_assert(kTemps == 4, "kernel_registers.h kquant_tile_fits counts 4 temporaries");
  return kquant_tile_fits(isa, packed_groups, tokens, nsub(t), fp_mem);
}

class KQuantGenerator : public CodeGenerator {
 public:
  KQuantGenerator(Isa isa, DType type, Epilogue epi, const KQuantShape& shape)
      : CodeGenerator(1 << 20), isa_(isa), type_(shape.expanded && type == DType::Q3_K ? DType::Q6_K : type),
        epi_(epi), shape_(shape) {
    zmm_ = !is_ymm_isa(isa);
    halves_ = int(vectors_per_group(isa));
    mult_ = mult_of(epi);
    nsub_ = nsub(type_);
    facc_mem_ = shape.fp32_acc_in_memory;
    expanded_ = shape.expanded;
    x_regs_ = expanded_ && temp_base() + kTemps + int(shape.tokens) <= (zmm_ ? 32 : 16);
    expanded_block_ = int(expanded_kquant_block_bytes(type_));
    kquant_ = has_packed_kquant(type_);
    LUMEN_ASSERT(kquant_ || expanded_, "only the GEMM over expanded rows takes a 32-wide type");
    if (kquant_) {
      header_ = int(packed_kquant_header_bytes(type_));
      sub_ = int(packed_kquant_sub_bytes(type_));
      super_ = int(packed_kquant_super_bytes(type_));
    }
    LUMEN_ASSERT(tile_ok(isa, type_, shape.groups * mult_, shape.tokens, facc_mem_),
                 "k-quant kernel shape does not fit the register file");
    generate();
  }

 private:
  Xmm vec(int i) const { return zmm_ ? Xmm(Zmm(i)) : Xmm(Ymm(i)); }
  int vec_bytes() const { return zmm_ ? 64 : 32; }
  int max_fp() const { return int(shape_.groups * mult_ * halves_ * shape_.tokens); }
  int max_int() const { return max_fp() * nsub_; }
  int temp_base() const { return max_int() + (facc_mem_ ? 0 : max_fp()); }
  Xmm tL() const { return vec(temp_base() + 0); }
  Xmm tH() const { return vec(temp_base() + 1); }
  Xmm tA() const { return vec(temp_base() + 2); }
  Xmm tT() const { return vec(temp_base() + 3); }
  // The expanded GEMM's activation registers above the temporaries (x_regs_).
  Xmm x_reg(int t) const { return vec(temp_base() + kTemps + t); }
  // Accumulator pair a = (packed group i, vector half h, token t) of a body of tc tokens.
  int pair(int tc, int i, int h, int t) const { return (i * halves_ + h) * tc + t; }
  Xmm iacc(int a, int s) const { return vec(a * nsub_ + s); }
  Xmm facc(int a) const { return vec(max_int() + a); }
  Address facc_slot(int a) { return ptr[rsp + kFloatAccs + vec_bytes() * a]; }
  // Q2_K's X_0, X_1 of token t (init_int_accs) at 16 s of a 32-byte slot above the fp32 ones.
  Address x_sums(int t, int s) {
    return ptr[rsp + kFloatAccs + (facc_mem_ ? vec_bytes() * max_fp() : 0) + 32 * t + 16 * s];
  }
  int frame_bytes() const {
    return kFloatAccs + (facc_mem_ ? vec_bytes() * max_fp() : 0) + (type_ == DType::Q2_K ? 32 * int(shape_.tokens) : 0);
  }
  Address cst(Const c) { return ptr[rip + consts_ + 64 * int(c)]; }

  const Reg64 pointer_regs_[kTilePointerRegs] = {r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15, rsi, rdx};
  const Reg64* group_ptr_ = pointer_regs_;
  const Reg64* token_ptr_ = pointer_regs_ + 4;
  const Reg64& args_ = rdi;
  const Reg64& jo_ = rax;  // byte offset of the sub-block in the super-block
  const Reg64& xo_ = rcx;  // byte offset of the 32-block in the activations

  // Integer ops that take zmm (EVEX) or ymm (VEX) forms.
  void vand(const Xmm& d, const Xmm& a, const Operand& b) { zmm_ ? vpandd(d, a, b) : vpand(d, a, b); }
  void vor(const Xmm& d, const Xmm& a, const Operand& b) { zmm_ ? vpord(d, a, b) : vpor(d, a, b); }
  void vzero(const Xmm& v) { zmm_ ? vpxord(v, v, v) : vpxor(v, v, v); }
  void vcopy(const Xmm& d, const Xmm& s) { zmm_ ? vmovdqa32(d, s) : vmovdqa(d, s); }

  void generate() {
    const Reg64 callee_saved[] = {rbx, rbp, r12, r13, r14, r15};
    for (const Reg64& r : callee_saved) push(r);
    // The frame 64-byte aligned, so that no vector slot splits a cache line
    // (a split slot keeps a store from forwarding to the next FMA's load).
    mov(r11, rsp);
    sub(rsp, frame_bytes());
    and_(rsp, -64);
    mov(qword[rsp + kSavedRsp], r11);
    Label done, m_loop, n_loop, n_next;

    mov(rax, qword[args_ + kArgMRows]);
    test(rax, rax);
    jle(done, T_NEAR);
    cmp(qword[args_ + kArgNTokens], 0);
    jle(done, T_NEAR);
    // k-quant weights exist only for K % 256 == 0: anything else writes nothing.
    // (The expanded GEMM walks one 32-block at a time: Q4_1/Q5_1 take any K.)
    if (kquant_) {
      test(byte[args_ + kArgKBlocks], kKQuantSubBlocks - 1);
      jnz(done, T_NEAR);
    }
    add(rax, 15);
    shr(rax, 4);
    mov(qword[rsp + kGroupsTotal], rax);
    mov(rax, qword[args_ + kArgKBlocks]);
    imul(rcx, rax, sizeof(ActBlock));
    mov(qword[rsp + kKEnd], rcx);
    if (expanded_) {
      imul(rcx, rax, expanded_block_);
    } else {
      shr(rax, 3);
      imul(rcx, rax, super_);
    }
    mov(qword[rsp + kGroupStride], rcx);
    imul(rcx, rcx, mult_);
    mov(qword[rsp + kTileStride], rcx);
    imul(rcx, qword[args_ + kArgXStride], sizeof(ActBlock));
    mov(qword[rsp + kXStrideBytes], rcx);
    mov(qword[rsp + kMg], 0);

    L(m_loop);
    mov(qword[rsp + kNt], 0);
    L(n_loop);
    detail::emit_tile_bodies(*this, int(shape_.groups), int(shape_.tokens), kGroupsTotal, kMg, kNt, qword[args_ + kArgNTokens], n_next,
                             [this](int gc, int tc) { tile_body(gc, tc); });

    L(n_next);
    mov(rax, qword[rsp + kNt]);
    add(rax, shape_.tokens);
    mov(qword[rsp + kNt], rax);
    cmp(rax, qword[args_ + kArgNTokens]);
    jl(n_loop, T_NEAR);
    mov(rax, qword[rsp + kMg]);
    add(rax, shape_.groups);
    mov(qword[rsp + kMg], rax);
    cmp(rax, qword[rsp + kGroupsTotal]);
    jl(m_loop, T_NEAR);

    L(done);
    vzeroupper();
    mov(rsp, qword[rsp + kSavedRsp]);
    for (int i = 5; i >= 0; --i) pop(callee_saved[i]);
    ret();
    emit_constants();
  }

  void emit_constants() {
    const float f[] = {-0.0f,          88.3762626647949f, -87.3365447504f, 1.44269504088896341f, 0.693359375f,
                       -2.12194440e-4f, 1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,      4.1665795894e-2f,
                       1.6666665459e-1f, 5.0000001201e-1f, 1.0f,            1.0f / 128.0f};
    static_assert(std::size(f) == kNib);
    align(64);
    L(consts_);
    for (float v : f)
      for (int i = 0; i < 16; ++i) dd(std::bit_cast<uint32_t>(v));
    const uint32_t ints[] = {0x0F0F0F0Fu, 0x30303030u, 0x10101010u, 0x01010101u, 0x00010001u,
                             0xFFE0FFE0u, 0x03030303u, 0x04040404u, 0xFFFCFFFCu, 0xFFFFFFFFu};
    static_assert(std::size(ints) == kNumConsts - kNib);
    for (uint32_t v : ints)
      for (int i = 0; i < 16; ++i) dd(v);
    L(row_masks_);  // 8 x -1 then 8 x 0: loading at (8 - n) * 4 gives n leading ones
    for (int i = 0; i < 16; ++i) dd(i < 8 ? 0xFFFFFFFFu : 0u);
  }

  void tile_body(int gc, int tc) {
    const int pc = gc * mult_;
    token_ptr_ = pointer_regs_ + pc;
    detail::emit_tile_pointers(*this, group_ptr_, pc, token_ptr_, tc, kMg, kNt, kTileStride, kGroupStride, kXStrideBytes);
    const int npairs = pc * halves_ * tc;
    if (facc_mem_) {
      vzero(tT());
      for (int a = 0; a < npairs; ++a) vmovups(facc_slot(a), tT());
    } else {
      for (int a = 0; a < npairs; ++a) vzero(facc(a));
    }
    Label sb_loop, j_loop, k_done;
    xor_(xo_, xo_);
    cmp(xo_, qword[rsp + kKEnd]);
    jae(k_done, T_NEAR);
    if (expanded_) {
      // One 32-block after another: jo_ is its byte offset in the group.
      xor_(jo_, jo_);
      L(j_loop);
      expanded_sub_block(pc, tc);
      add(jo_, expanded_block_);
      add(xo_, int(sizeof(ActBlock)));
      cmp(xo_, qword[rsp + kKEnd]);
      jb(j_loop, T_NEAR);
      L(k_done);
      epilogue(gc, tc);
      return;
    }
    L(sb_loop);
    mov(jo_, header_);
    L(j_loop);
    sub_block(pc, tc);
    add(jo_, sub_);
    add(xo_, int(sizeof(ActBlock)));
    cmp(jo_, header_ + kKQuantSubBlocks * sub_);
    jb(j_loop, T_NEAR);
    for (int i = 0; i < pc; ++i) add(group_ptr_[i], super_);
    cmp(xo_, qword[rsp + kKEnd]);
    jb(sb_loop, T_NEAR);
    L(k_done);
    epilogue(gc, tc);
  }

  Address xq(int t, int off) { return ptr[token_ptr_[t] + xo_ + kXQs + off]; }

  // acc += the u8 vector w times the activation dword at qs + off of each token.
  void dots(const Xmm& w, int i, int h, int tc, int s, int off) {
    for (int t = 0; t < tc; ++t) {
      const Xmm acc = iacc(pair(tc, i, h, t), s);
      if (isa_ == Isa::Avx512Vnni) {
        vpdpbusd(acc, w, ptr_b[token_ptr_[t] + xo_ + kXQs + off]);
      } else if (isa_ == Isa::AvxVnni) {
        vpbroadcastd(tT(), xq(t, off));
        vpdpbusd(acc, w, tT(), VexEncoding);
      } else {
        vpbroadcastd(tT(), xq(t, off));
        vpmaddubsw(tT(), w, tT());
        vpmaddwd(tT(), tT(), cst(kI16One));
        vpaddd(acc, acc, tT());
      }
    }
  }

  // Integer accumulators: 0, or for Q6_K (Q3_K) -32 (-4) * (sum of the 16 x of the half);
  // Q2_K's X_s of each token.
  void init_int_accs(int pc, int tc) {
    if (type_ == DType::Q2_K)
      for (int t = 0; t < tc; ++t) q2k_x_sums(t);
    for (int t = 0; t < tc; ++t) {
      for (int s = 0; s < nsub_; ++s) {
        if (!has_q6k_form(type_)) {
          for (int i = 0; i < pc; ++i)
            for (int h = 0; h < halves_; ++h) vzero(iacc(pair(tc, i, h, t), s));
          continue;
        }
        if (s == 1) {
          // -32 * (sum of x 16..31) = ActBlock::sum / 4 - (-32 * sum of x 0..15), exact ints
          // (Q3_K: -4 *, sum / 32): 3 operations on the second half, not 7.
          const Xmm first = iacc(pair(tc, 0, 0, t), 1);
          vpbroadcastd(first, ptr[token_ptr_[t] + xo_ + kXSum]);
          vpsrad(first, first, type_ == DType::Q3_K ? 5 : 2);
          vpsubd(first, first, iacc(pair(tc, 0, 0, t), 0));
          for (int i = 0; i < pc; ++i)
            for (int h = 0; h < halves_; ++h)
              if (i || h) vcopy(iacc(pair(tc, i, h, t), 1), first);
          continue;
        }
        const Xmm a(tA().getIdx()), b(tT().getIdx()), one(tH().getIdx());
        zmm_ ? vmovdqu8(one, cst(kU8One)) : vmovdqu(one, cst(kU8One));
        vpmaddubsw(a, one, xq(t, 16 * s));
        vpmaddwd(a, a, cst(type_ == DType::Q3_K ? kI16Minus4 : kI16Minus32));
        vpshufd(b, a, 0x4E);
        vpaddd(a, a, b);
        vpshufd(b, a, 0xB1);
        vpaddd(a, a, b);
        const Xmm first = iacc(pair(tc, 0, 0, t), s);
        vpbroadcastd(first, a);
        for (int i = 0; i < pc; ++i)
          for (int h = 0; h < halves_; ++h)
            if (i || h) vcopy(iacc(pair(tc, i, h, t), s), first);
      }
    }
  }

  // X_s = float(-(sum of qx 16s .. 16s + 15)) * dx of token t, s = 0, 1, to
  // x_sums(t, s): one ymm of the 32 qx, each 128-bit lane reduced to its sum.
  void q2k_x_sums(int t) {
    const Ymm a(tA().getIdx()), b(tT().getIdx()), one(tH().getIdx());
    zmm_ ? vmovdqu8(one, cst(kU8One)) : vmovdqu(one, cst(kU8One));
    vpmaddubsw(a, one, ptr[token_ptr_[t] + xo_ + kXQs]);
    vpmaddwd(a, a, cst(kI16MinusOne));
    vpshufd(b, a, 0x4E);
    vpaddd(a, a, b);
    vpshufd(b, a, 0xB1);
    vpaddd(a, a, b);
    vcvtdq2ps(a, a);
    vbroadcastss(b, ptr[token_ptr_[t] + xo_ + kXD]);
    vmulps(a, a, b);
    vmovups(x_sums(t, 0), a);
  }

  // One 32-block of expanded weights (packed_kquant.h): 8 vectors of u8 q,
  // then the fp32 factors; the same arithmetic as sub_block on packed ones.
  void expanded_sub_block(int pc, int tc) {
    init_int_accs(pc, tc);
    const Xmm W = tL();
    for (int e = 0; e < 8; ++e) {
      const int s = nsub_ == 2 ? e / 4 : 0;
      // Each token's activation dword once into its register, for every row of the tile.
      if (x_regs_)
        for (int t = 0; t < tc; ++t) vpbroadcastd(x_reg(t), xq(t, 4 * e));
      for (int i = 0; i < pc; ++i) {
        for (int h = 0; h < halves_; ++h) {
          const Address q = ptr[group_ptr_[i] + jo_ + 64 * e + vec_bytes() * h];
          zmm_ ? vmovdqu8(W, q) : vmovdqu(W, q);
          if (!x_regs_) {
            dots(W, i, h, tc, s, 4 * e);
            continue;
          }
          for (int t = 0; t < tc; ++t) {
            const Xmm acc = iacc(pair(tc, i, h, t), s);
            if (isa_ == Isa::Avx512Vnni) {
              vpdpbusd(acc, W, x_reg(t));
            } else if (isa_ == Isa::AvxVnni) {
              vpdpbusd(acc, W, x_reg(t), VexEncoding);
            } else {
              vpmaddubsw(tT(), W, x_reg(t));
              vpmaddwd(tT(), tT(), cst(kI16One));
              vpaddd(acc, acc, tT());
            }
          }
        }
      }
    }
    // Per token: dx (and X = float(ActBlock::sum) * dx) once for every row of the tile.
    const Xmm Dx = tH(), X = tL(), T = tT();
    for (int t = 0; t < tc; ++t) {
      vbroadcastss(Dx, ptr[token_ptr_[t] + xo_ + kXD]);
      if (nsub_ == 1) {
        vpbroadcastd(X, ptr[token_ptr_[t] + xo_ + kXSum]);
        vcvtdq2ps(X, X);
        vmulps(X, X, Dx);
      }
      for (int s = 0; s < nsub_; ++s) {
        for (int i = 0; i < pc; ++i) {
          for (int h = 0; h < halves_; ++h) {
            const int a = pair(tc, i, h, t);
            const Xmm acc = iacc(a, s);
            const int f = int(kExpandedKQuantFactors) + vec_bytes() * h;
            vcvtdq2ps(acc, acc);
            vmulps(T, Dx, ptr[group_ptr_[i] + jo_ + f + 64 * s]);  // (d * sc) * dx
            if (nsub_ == 2) {
              accumulate(a, acc, T);
              continue;
            }
            // acc = fma(isum, (d*sc)*dx, acc), then fma((dmin*m)/128, X, acc)
            if (facc_mem_) {
              vfmadd213ps(acc, T, facc_slot(a));
              vfmadd231ps(acc, X, ptr[group_ptr_[i] + jo_ + f + 64]);
              vmovups(facc_slot(a), acc);
            } else {
              vfmadd231ps(facc(a), acc, T);
              vfmadd231ps(facc(a), X, ptr[group_ptr_[i] + jo_ + f + 64]);
            }
          }
        }
      }
      if (type_ != DType::Q2_K) continue;
      for (int s = 0; s < 2; ++s) {  // acc = fma(m_s * dmin, X_s, acc)
        vbroadcastss(X, x_sums(t, s));
        for (int i = 0; i < pc; ++i) {
          for (int h = 0; h < halves_; ++h) {
            vmovups(T, ptr[group_ptr_[i] + jo_ + int(kExpandedKQuantFactors) + 128 + 64 * s + vec_bytes() * h]);
            accumulate(pair(tc, i, h, t), T, X);
          }
        }
      }
    }
  }

  void sub_block(int pc, int tc) {
    init_int_accs(pc, tc);
    if (shape_.prefetch_bytes > 0) {
      const int pf = int(shape_.prefetch_bytes);
      for (int i = 0; i < pc; ++i) {
        for (int line = 0; line < sub_; line += 64) prefetcht0(ptr[group_ptr_[i] + jo_ + pf + line]);
        prefetcht0(ptr[group_ptr_[i] + pf]);  // the next super-block's d (and dmin)
      }
    }
    if (type_ == DType::Q2_K || type_ == DType::Q3_K) return two_bit_sub_block(pc, tc);
    const Xmm L_ = tL(), H_ = tH(), A_ = tA(), T_ = tT();
    for (int v = 0; v < 4; ++v) {
      const int s = type_ == DType::Q6_K ? v / 2 : 0;
      for (int i = 0; i < pc; ++i) {
        for (int h = 0; h < halves_; ++h) {
          const int hb = vec_bytes() * h;
          if (zmm_) {
            vmovdqu8(L_, ptr[group_ptr_[i] + jo_ + 32 + 64 * v]);
          } else {
            vmovdqu(L_, ptr[group_ptr_[i] + jo_ + 32 + 64 * v + hb]);
          }
          if (type_ != DType::Q4_K) {
            const int u = type_ == DType::Q6_K ? v / 2 : 0;
            const Address qh = ptr[group_ptr_[i] + jo_ + int(kKQuantHighBits) + 64 * u + hb];
            zmm_ ? vmovdqu8(H_, qh) : vmovdqu(H_, qh);
          }
          // Low nibbles: k0 .. k0+3; Q6_K's high bits 4s' .. 4s'+1 go to bits 4-5,
          // Q5_K's fifth bit 2v to bit 4.
          vand(A_, L_, cst(kNib));
          if (type_ == DType::Q5_K) or_bit(A_, H_, T_, 4 - 2 * v, kBit4);
          if (type_ == DType::Q6_K) {
            if (v % 2 == 0) {
              vpsllw(T_, H_, 4);
              vand(T_, T_, cst(kHigh2));
            } else {
              vand(T_, H_, cst(kHigh2));
            }
            vor(A_, A_, T_);
          }
          dots(A_, i, h, tc, s, 8 * v);
          // High nibbles: k0+4 .. k0+7; Q6_K's high bits 4s'+2 .. 4s'+3, Q5_K's 2v+1.
          vpsrlw(A_, L_, 4);
          vand(A_, A_, cst(kNib));
          if (type_ == DType::Q5_K) or_bit(A_, H_, T_, 3 - 2 * v, kBit4);
          if (type_ == DType::Q6_K) {
            if (v % 2 == 0) {
              vpsllw(T_, H_, 2);
            } else {
              vpsrlw(T_, H_, 2);
            }
            vand(T_, T_, cst(kHigh2));
            vor(A_, A_, T_);
          }
          dots(A_, i, h, tc, s, 8 * v + 4);
        }
      }
    }
    fp_stage(pc, tc);
  }

  // Q2_K's and Q3_K's 32-block: vector e (k0 + 4e .. k0 + 4e + 3, 16-block e / 4) is
  // the 2-bit field e % 4 of 2-bit vector e / 4 (and Q3_K's bit e of the third bits).
  void two_bit_sub_block(int pc, int tc) {
    const Xmm L_ = tL(), H_ = tH(), A_ = tA(), T_ = tT();
    for (int e = 0; e < 8; ++e) {
      for (int i = 0; i < pc; ++i) {
        for (int h = 0; h < halves_; ++h) {
          const int hb = vec_bytes() * h;
          const Address low = ptr[group_ptr_[i] + jo_ + int(kKQuantTwoBits) + 64 * (e / 4) + hb];
          zmm_ ? vmovdqu8(L_, low) : vmovdqu(L_, low);
          if (e % 4) vpsrlw(L_, L_, 2 * (e % 4));
          vand(A_, L_, cst(kLow2));
          if (type_ == DType::Q3_K) {
            const Address third = ptr[group_ptr_[i] + jo_ + int(kQ3KThirdBits) + hb];
            zmm_ ? vmovdqu8(H_, third) : vmovdqu(H_, third);
            or_bit(A_, H_, T_, 2 - e, kBit2);
          }
          dots(A_, i, h, tc, e / 4, 4 * e);
        }
      }
    }
    fp_stage(pc, tc);
  }

  // A |= bit `mask` of (H shifted left by `left`, right when negative): the 16-bit
  // shifts carry bits across bytes only into positions the mask clears.
  void or_bit(const Xmm& A, const Xmm& H, const Xmm& T, int left, Const mask) {
    if (left > 0) {
      vpsllw(T, H, left);
    } else if (left < 0) {
      vpsrlw(T, H, -left);
    }
    vand(T, left == 0 ? H : T, cst(mask));
    vor(A, A, T);
  }

  // T = scale * dx of token t (L is clobbered on ymm).
  void times_dx(const Xmm& T, const Xmm& scale, int t) {
    if (zmm_) {
      vmulps(T, scale, ptr_b[token_ptr_[t] + xo_ + kXD]);
    } else {
      vbroadcastss(tL(), ptr[token_ptr_[t] + xo_ + kXD]);
      vmulps(T, scale, tL());
    }
  }

  // F(a) = fma(v, scale, F(a)), with F in a register or in its slot.
  void accumulate(int a, const Xmm& v, const Xmm& scale) {
    if (facc_mem_) {
      vfmadd213ps(v, scale, facc_slot(a));
      vmovups(facc_slot(a), v);
    } else {
      vfmadd231ps(facc(a), v, scale);
    }
  }

  void fp_stage(int pc, int tc) {
    const Xmm S = tH(), A = tA(), T = tT(), X = tL();
    for (int i = 0; i < pc; ++i) {
      for (int h = 0; h < halves_; ++h) {
        const Reg64& g = group_ptr_[i];
        vcvtph2ps(S, ptr[g + 16 * h]);  // d of 16 (8) rows
        if (type_ == DType::Q2_K) {
          q2k_fp_stage(i, h, tc);
          continue;
        }
        if (!has_q6k_form(type_)) {
          vpmovzxbd(A, ptr[g + jo_ + 8 * h]);  // 6-bit scales
          vcvtdq2ps(A, A);
          vmulps(S, S, A);  // d * sc
          vcvtph2ps(A, ptr[g + 32 + 16 * h]);
          vpmovzxbd(T, ptr[g + jo_ + 16 + 8 * h]);  // 6-bit mins
          vcvtdq2ps(T, T);
          vmulps(A, A, T);  // dmin * m
          vmulps(A, A, cst(kInv128));
          for (int t = 0; t < tc; ++t) {
            const int a = pair(tc, i, h, t);
            const Xmm acc = iacc(a, 0);
            times_dx(T, S, t);
            vcvtdq2ps(acc, acc);
            if (facc_mem_) {
              vfmadd213ps(acc, T, facc_slot(a));
            } else {
              vfmadd231ps(facc(a), acc, T);
            }
            // X = float(ActBlock::sum) * dx
            if (zmm_) {
              vcvtdq2ps(X, ptr_b[token_ptr_[t] + xo_ + kXSum]);
              vmulps(X, X, ptr_b[token_ptr_[t] + xo_ + kXD]);
            } else {
              vpbroadcastd(X, ptr[token_ptr_[t] + xo_ + kXSum]);
              vcvtdq2ps(X, X);
              vbroadcastss(T, ptr[token_ptr_[t] + xo_ + kXD]);
              vmulps(X, X, T);
            }
            if (facc_mem_) {
              vfmadd231ps(acc, A, X);
              vmovups(facc_slot(a), acc);
            } else {
              vfmadd231ps(facc(a), A, X);
            }
          }
        } else {
          scale_terms_per_16(i, h, tc);
        }
      }
    }
  }

  // acc = fma(float(isum_s), (sc_s * d) * dx, acc), s = 0, 1, of packed group
  // i, half h (S holds d): Q6_K's and Q3_K's int8 scales, Q2_K's low nibbles.
  void scale_terms_per_16(int i, int h, int tc) {
    const Xmm S = tH(), A = tA(), T = tT();
    for (int s = 0; s < 2; ++s) {
      const Address scales = ptr[group_ptr_[i] + jo_ + 16 * s + 8 * h];
      if (type_ == DType::Q2_K) {
        vpmovzxbd(A, scales);
        vand(A, A, cst(kNib));
      } else {
        vpmovsxbd(A, scales);
      }
      vcvtdq2ps(A, A);
      vmulps(A, A, S);  // sc * d
      for (int t = 0; t < tc; ++t) {
        const int a = pair(tc, i, h, t);
        const Xmm acc = iacc(a, s);
        times_dx(T, A, t);
        vcvtdq2ps(acc, acc);
        accumulate(a, acc, T);
      }
    }
  }

  // Q2_K's fp32 stage of packed group i, half h (S holds d): the scale terms,
  // then the min terms (the 4-bit sc and m of 16-block s share a byte).
  void q2k_fp_stage(int i, int h, int tc) {
    const Xmm S = tH(), A = tA(), X = tL();
    const Reg64& g = group_ptr_[i];
    scale_terms_per_16(i, h, tc);
    vcvtph2ps(S, ptr[g + 32 + 16 * h]);  // dmin
    for (int s = 0; s < 2; ++s) {
      vpmovzxbd(A, ptr[g + jo_ + 16 * s + 8 * h]);
      vpsrld(A, A, 4);
      vcvtdq2ps(A, A);
      vmulps(A, A, S);  // m * dmin
      for (int t = 0; t < tc; ++t) {
        vbroadcastss(X, x_sums(t, s));
        accumulate(pair(tc, i, h, t), X, A);
      }
    }
  }

  // exp(-g) into e (clobbers z and n), as the Q8_0 kernels compute it.
  void exp_neg(const Xmm& g, const Xmm& e, const Xmm& z, const Xmm& n) {
    vxorps(z, g, cst(kSignMask));
    vminps(z, z, cst(kExpHi));
    vmaxps(z, z, cst(kExpLo));
    vmulps(n, z, cst(kLog2e));
    if (zmm_) {
      vrndscaleps(n, n, 0);
    } else {
      vroundps(n, n, 0);
    }
    vfnmadd231ps(z, n, cst(kLn2Hi));
    vfnmadd231ps(z, n, cst(kLn2Lo));
    vmovups(e, cst(kP0));
    for (Const c : {kP1, kP2, kP3, kP4, kP5, kOne, kOne}) vfmadd213ps(e, z, cst(c));
    if (zmm_) {
      vscalefps(e, e, n);
    } else {
      vcvtps2dq(n, n);
      vpslld(n, n, 23);
      vpaddd(e, e, n);
    }
  }

  // The fp32 result of pair a in a register (loaded into its int accumulator
  // register when the fp32 ones are in memory).
  Xmm result(int a) {
    if (!facc_mem_) return facc(a);
    const Xmm v = iacc(a, 0);
    vmovups(v, facc_slot(a));
    return v;
  }

  void epilogue(int gc, int tc) {
    const bool bias = epi_ == Epilogue::Bias || epi_ == Epilogue::BiasResidual;
    const bool residual = epi_ == Epilogue::Residual || epi_ == Epilogue::BiasResidual;
    const Reg64 y_ptr = r8, b_ptr = r9, r_ptr = r10, rows = r11, tmp = rbx;
    if (bias) {
      mov(b_ptr, qword[rsp + kMg]);
      shl(b_ptr, 6);
      add(b_ptr, qword[args_ + kArgBias]);
    }
    for (int g = 0; g < gc; ++g) {
      mov(rows, qword[rsp + kMg]);
      add(rows, g);
      shl(rows, 4);
      neg(rows);
      add(rows, qword[args_ + kArgMRows]);
      mov(tmp, 16);
      cmp(rows, tmp);
      cmovg(rows, tmp);
      for (int h = 0; h < halves_; ++h) {
        const Xmm mask = tL();
        if (zmm_) {
          mov(tmp.cvt32(), 0xFFFF);
          bzhi(tmp.cvt32(), tmp.cvt32(), rows.cvt32());
          kmovw(k1, tmp.cvt32());
        } else {
          mov(tmp, rows);
          if (h == 1) sub(tmp, 8);
          mov(rdx, 8);
          cmp(tmp, rdx);
          cmovg(tmp, rdx);
          xor_(edx, edx);
          cmp(tmp, rdx);
          cmovl(tmp, rdx);
          neg(tmp);
          lea(rdx, ptr[rip + row_masks_]);
          vmovdqu(mask, ptr[rdx + tmp * 4 + 32]);
        }
        const int row_byte = (g * 16 + h * 8) * 4;
        for (int t = 0; t < tc; ++t) {
          mov(y_ptr, qword[rsp + kNt]);
          add(y_ptr, t);
          if (residual) {
            mov(r_ptr, y_ptr);
            imul(r_ptr, qword[args_ + kArgRStride]);
          }
          imul(y_ptr, qword[args_ + kArgYStride]);
          mov(tmp, qword[rsp + kMg]);
          shl(tmp, 4);
          add(y_ptr, tmp);
          shl(y_ptr, 2);
          add(y_ptr, qword[args_ + kArgY]);
          if (residual) {
            add(r_ptr, tmp);
            shl(r_ptr, 2);
            add(r_ptr, qword[args_ + kArgResidual]);
          }
          const Xmm v = result(pair(tc, g * mult_, h, t));
          if (epi_ == Epilogue::SiluMul) {
            const Xmm up = result(pair(tc, g * 2 + 1, h, t));
            const Xmm e = tT();
            exp_neg(v, e, tH(), tA());
            vaddps(e, e, cst(kOne));
            vdivps(v, v, e);
            vmulps(v, v, up);
          }
          if (bias) add_masked(v, ptr[b_ptr + row_byte], mask);
          if (residual) add_masked(v, ptr[r_ptr + row_byte], mask);
          if (zmm_) {
            vmovups(ptr[y_ptr + row_byte] | k1, v);
          } else {
            vmaskmovps(ptr[y_ptr + row_byte], mask, v);
          }
        }
      }
    }
  }

  void add_masked(const Xmm& v, const Address& addr, const Xmm& mask) {
    const Xmm t = tH();
    if (zmm_) {
      vmovups(t | k1 | T_z, addr);
    } else {
      vmaskmovps(t, mask, addr);
    }
    vaddps(v, v, t);
  }

  Isa isa_;
  DType type_;
  Epilogue epi_;
  KQuantShape shape_;
  bool zmm_ = true;
  int halves_ = 1, mult_ = 1, nsub_ = 1;
  bool facc_mem_ = false, expanded_ = false, x_regs_ = false, kquant_ = true;
  int header_ = 0, sub_ = 0, super_ = 0, expanded_block_ = 0;
  Label consts_, row_masks_;
};

}  // namespace

bool is_kquant_kernel(const program::KernelId& kernel) {
  return has_packed_kquant(kernel.weight) || (kernel.kind == KernelKind::Gemm && has_expanded_kquant(kernel.weight));
}

KQuantShape kquant_kernel_shape(Isa isa, const program::KernelId& kernel, CpuTune tune) {
  LUMEN_ASSERT(is_kquant_kernel(kernel), "no k-quant kernel " + program::to_string(kernel));
  const DType t = kernel.weight;
  const int mult = mult_of(kernel.epilogue);
  KQuantShape shape;
  if (kernel.kind == KernelKind::Gemm) {
    // The id's tile over expanded weights, which a task made and left in cache: no prefetch.
    shape.groups = kernel.tile_m / kPackRows;
    shape.tokens = kernel.tile_n;
    shape.fp32_acc_in_memory = kquant_gemm_fp32_acc_in_memory(isa, shape.groups * mult, shape.tokens, nsub(t));
    shape.expanded = true;
    return shape;
  }
  // One super-block ahead on every weight stream (about the Q8_0 kernels' 2176 B).
  shape.prefetch_bytes = packed_kquant_super_bytes(t);
  if (kernel.kind == KernelKind::Gemv) {
    if (gemv_prefetch(tune, isa, kernel.weight) == WeightPrefetch::None) shape.prefetch_bytes = 0;
    // The Q8_0 GEMV's streams: 4 packed groups (2 of two ymm halves), or
    // one as the tuning says (a SiluMul pair side by side: not measured one
    // after the other here).
    shape.groups = one_stream(tune) ? 1 : std::max(1, (is_ymm_isa(isa) ? 2 : 4) / mult);
    return shape;
  }
  // Batch: the most tokens (up to the batch size), then the most groups (up
  // to 2 packed), with the fp32 accumulators in registers when that ties.
  // The types with two int accumulators (a scale per 16-block: 2 to 4 FMAs
  // per row, token and 32-block, each a load-FMA-store chain in a stack slot)
  // always keep them in registers: fewer tokens per tile measured faster
  // (docs/kernels.md, "Q3_K and Q2_K kernels").
  int64_t best_t = 0;
  for (int64_t g = std::max(1, 2 / mult); g >= 1; --g) {
    for (bool mem : {false, true}) {
      if (mem && nsub(t) == 2) continue;
      int64_t tok = 0;
      while (tok < program::KernelId::kBatchMaxTokens && tile_ok(isa, t, g * mult, tok + 1, mem)) ++tok;
      if (tok > best_t) {
        best_t = tok;
        shape.groups = g;
        shape.tokens = tok;
        shape.fp32_acc_in_memory = mem;
      }
    }
  }
  LUMEN_ASSERT(best_t >= 1, "no k-quant batch tile fits");
  return shape;
}

std::vector<uint8_t> generate_kquant_kernel(Isa isa, const program::KernelId& kernel, const KQuantShape& shape) {
  LUMEN_ASSERT(is_kquant_kernel(kernel), "no k-quant kernel " + program::to_string(kernel));
  KQuantGenerator gen(isa, kernel.weight, kernel.epilogue, shape);
  const uint8_t* code = gen.getCode();
  return std::vector<uint8_t>(code, code + gen.getSize());
}

std::vector<uint8_t> generate_kquant_kernel(Isa isa, const program::KernelId& kernel, CpuTune tune) {
  return generate_kquant_kernel(isa, kernel, kquant_kernel_shape(isa, kernel, tune));
}

}  // namespace lumen::codegen
