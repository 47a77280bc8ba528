// The Q8_0 matmul kernel generator (xbyak): one parameterized code shape for
// every ISA, epilogue and register tile.
//
// A call walks token chunks whose activations fit in L2 (outer), output row
// tiles, then token tiles (inner): a row tile's weights stay in L1/L2 while
// every token tile of the chunk reuses them. A register
// tile holds `pc` packed 16-row groups x `tc` tokens: per 32-block it loads
// each 64-byte weight vector once and multiplies it by a broadcast activation
// dword of every token (int32 dot products, exact), then converts each
// block's int sums to fp32 and accumulates sum * (w_scale * x_scale) with one
// FMA per vector. A tile with sequential_groups makes one pass over K per
// group instead (one weight stream; the same sums). Edge tiles (fewer
// groups or tokens) get their own unrolled bodies; rows past m_rows are never
// stored (masked stores).
//
// Dot products per ISA (packed format in kernel_support.h):
//   avx512-vnni: vpdpbusd on u8 (w+128) x s8 x, accumulator starts at
//                -128*sum(x) (ActBlock::sum);
//   avx512:      |w| (u8) x (x negated where w < 0) with vpmaddubsw (cannot
//                saturate: 2*128*127 < 32768), then vpmaddwd by ones;
//   avx2:        the same with vpsignb, on the two 8-row halves of a group;
//   avx-vnni:    VEX vpdpbusd on the two ymm halves, w+128 as avx512-vnni; no
//                embedded broadcast in VEX, so each activation dword is
//                broadcast once into a register for every group and half.
// The 4-bit weights (packed_4bit.h) are unsigned quants q: each 4-k step
// takes a nibble half of a 64-byte vector (vpsrlw, vpand; Q5_0 and Q5_1 add
// their fifth bits: a kmovq mask and a masked vpaddb of 16 on AVX-512, a
// vpshufb/vpand/vpcmpeqb expansion of the mask dword on the ymm ISAs), then
// vpdpbusd (VNNI) or vpmaddubsw + vpmaddwd (u8 q x s8 x, no sign trick).
// Q4_0's and Q5_0's offset folds into the accumulator's start: -8*sum(x) =
// ActBlock::sum / 16, -16*sum(x) = ActBlock::sum / 8. Q4_1 and Q5_1 add their
// min after the scale, per block: acc = fma(m * -1/128, float(ActBlock::sum) *
// x_scale, acc). IQ4_NL looks its level up with vpshufb from a 16-byte table:
// level + 128 as u8 on VNNI (the accumulator starts at ActBlock::sum, as
// Q8_0's), else the signed level with Q8_0's sign trick.
#include <xbyak/xbyak.h>

#include <bit>
#include <cstddef>
#include <stdexcept>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/common/internal_error.h"
#include "lumen/codegen/kernel_support.h"
#include "lumen/target/weight_formats.h"
#include "lumen/codegen/float_kernel.h"
#include "lumen/codegen/kquant_kernel.h"
#include "epilogue_generator.h"

namespace lumen::codegen {
namespace {

using program::Epilogue;
using namespace Xbyak;
using namespace Xbyak::util;

using namespace detail;

// Stack frame of the kernel (bytes from rsp).
// With fp32_acc_in_memory, the fp32 accumulators follow at kFloatAccs (one vector each).
constexpr int kMg = 0, kNt = 8, kGroupsTotal = 16, kGroupStride = 24, kTileStride = 32, kKEnd = 40,
              kXStrideBytes = 48, kChunk = 56, kChunkStart = 64, kChunkEnd = 72, kFloatAccs = 80;

// Constants of the 4-bit formats (64 bytes each), emitted only for them: the
// nibble mask, 16 (the fifth bit), the ymm expansion of a mask dword to bytes
// (vpshufb indices, then the bit each byte tests), IQ4_NL's levels (in every
// 16-byte lane; + 128 on VNNI) and -1/128 as fp32 (the mins' factor).
enum NibbleConst { kNibbleMask, kSixteen, kBitShuffle, kBitSelect, kLevels, kMinFactor, kNumNibbleConsts };

class MatMulGenerator : public EpilogueGenerator {
 public:
  MatMulGenerator(Isa isa, const program::KernelId& kernel, const KernelShape& shape)
      : EpilogueGenerator(isa, kernel.epilogue, kMg, kNt), isa_(isa), kernel_(kernel), shape_(shape) {
    avx512_ = !is_ymm_isa(isa);
    vnni_ = is_vnni_isa(isa);
    mult_ = kernel.epilogue == Epilogue::SiluMul ? 2 : 1;
    facc_mem_ = shape.fp32_acc_in_memory;
    format_ = kernel.weight;
    nibbles_ = is_packed_4bit(format_);
    levels_ = has_iq4_levels(format_);
    super_ = int(packed_super_blocks(format_));
    mins_ = has_mins(format_);
    block_bytes_ = int(packed_block_bytes(format_));
    LUMEN_ASSERT(block_bytes_ > 0, "matmul kernel: not a packed format");
    // kernel_shape() gives only tiles that fit; the benchmark's explicit
    // shapes must fit too.
    LUMEN_ASSERT(tile_fits(isa, shape.groups * mult_, shape.tokens, facc_mem_),
                 "matmul kernel shape does not fit the register file");
    // The AVX-VNNI kernels with fifth bits or levels need one more
    // temporary (high_bits(), level_table()); the ymm Q5_0 kernels too.
    LUMEN_ASSERT((!has_fifth_bits(format_) && !levels_) || !is_ymm_isa(isa) || high_bits().getIdx() < 16,
                 "matmul kernel shape leaves no register for the fifth bits or the level table");
    generate();
  }

 private:
  // ------------------------------------------------------------ registers
  // Accumulator of (packed group g, vector half h, token t) in a body of tc tokens.
  int acc_index(int tc, int g, int h, int t) const { return (g * halves_ + h) * tc + t; }
  // Temporaries live above the accumulators of the widest body: int and
  // fp32 ones, or only the int ones when the fp32 ones are in memory.
  int max_acc() const { return int(shape_.groups * mult_ * halves_ * shape_.tokens); }
  int acc_regs() const { return (facc_mem_ ? 1 : 2) * max_acc(); }
  Xmm tmp_w() const { return vec(acc_regs() + 0); }
  Xmm tmp_s() const { return vec(acc_regs() + 1); }
  Xmm tmp_t() const { return vec(acc_regs() + 2); }
  Xmm tmp_x() const { return vec(acc_regs() + 3); }
  Xmm ones() const { return vec(acc_regs() + 4); }
  Xmm zero() const { return vec(acc_regs() + 5); }
  int vec_bytes() const { return avx512_ ? 64 : 32; }
  // With fp32_acc_in_memory, the stack slot of accumulator pair a.
  Address facc_slot(int a) { return ptr[rsp + kFloatAccs + vec_bytes() * a]; }
  int frame_bytes() const { return kFloatAccs + (facc_mem_ ? vec_bytes() * max_acc() : 0); }
  // VNNI tiles of several groups broadcast each activation dword once into a
  // register and reuse it for every group, when the registers allow.
  // AVX-VNNI always does (VEX has no {1to8}): its x registers overlay tmp_s,
  // tmp_t and tmp_x, which the dot products leave free (tc <= max_tile_tokens).
  bool x_in_regs(int pc, int tc) const {
    if (isa_ == Isa::AvxVnni) return true;
    return isa_ == Isa::Avx512Vnni && pc > 1 && acc_regs() + 4 + tc <= 32;
  }
  Xmm x_reg(int t) const { return vec(acc_regs() + (isa_ == Isa::AvxVnni ? 1 : 4) + t); }
  // The ymm Q5_0 kernels expand the fifth bits here: after the x registers
  // (AVX-VNNI) or in the zero() slot, which only AVX-512 uses.
  Xmm high_bits() const { return vec(isa_ == Isa::AvxVnni ? acc_regs() + 1 + int(shape_.tokens) : acc_regs() + 5); }
  // IQ4_NL's and IQ4_XS's levels for vpshufb, loaded once per block: in tmp_t, which only
  // the fp32 stage uses, or (AVX-VNNI, whose x registers overlay tmp_t) in
  // high_bits(), which they have no use for.
  Xmm level_table() const { return isa_ == Isa::AvxVnni ? high_bits() : tmp_t(); }

  // Pointer registers: the packed groups of a body take the first ones, its
  // tokens the next ones (a GEMV has 1 token, so it can stream 8 groups).
  const Reg64 pointer_regs_[kTilePointerRegs] = {r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15, rsi, rdx};
  const Reg64* group_ptr_ = pointer_regs_;
  const Reg64* token_ptr_ = pointer_regs_ + 4;
  const Reg64& args_ = rdi;
  const Reg64& woff_ = rax;
  const Reg64& xoff_ = rcx;
  // woff_ plus the bytes of a tile's groups, for prefetch_next_tile: the
  // last pointer register, which a GEMV's or batch kernel's tile (at most
  // 2 packed groups and 8 tokens) leaves free.
  const Reg64& next_tile_off_ = pointer_regs_[kTilePointerRegs - 1];
  bool prefetches() const { return shape_.prefetch_next_tile || shape_.prefetch_bytes > 0; }

  Address nib_cst(NibbleConst c) { return ptr[rip + nibble_consts_ + 64 * int(c)]; }

  // ----------------------------------------------------------- structure
  void generate() {
    const Reg64 callee_saved[] = {rbx, rbp, r12, r13, r14, r15};
    for (const Reg64& r : callee_saved) push(r);
    sub(rsp, frame_bytes());
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
    imul(rcx, rax, block_bytes_);
    mov(qword[rsp + kGroupStride], rcx);
    imul(rcx, rcx, mult_);
    mov(qword[rsp + kTileStride], rcx);
    imul(rcx, rax, sizeof(ActBlock));
    mov(qword[rsp + kKEnd], rcx);
    imul(rcx, qword[args_ + kArgXStride], sizeof(ActBlock));
    mov(qword[rsp + kXStrideBytes], rcx);
    detail::emit_chunked_tile_loop(*this, int(shape_.groups), int(shape_.tokens), shape_.chunk_act_bytes,
                                   {kMg, kNt, kGroupsTotal, kKEnd, kChunk, kChunkStart, kChunkEnd},
                                   [this](int gc, int tc) { tile_body(gc, tc); });

    L(done);
    vzeroupper();
    add(rsp, frame_bytes());
    for (int i = 5; i >= 0; --i) pop(callee_saved[i]);
    ret();

    emit_constants();
  }

  void emit_constants() {
    emit_epilogue_constants();
    if (!nibbles_) return;
    align(64);
    L(nibble_consts_);
    for (int i = 0; i < 64; ++i) db(0x0F);
    for (int i = 0; i < 64; ++i) db(0x10);
    // Byte b of a ymm half tests bit b of the mask dword: in 128-bit lane
    // b / 16, byte b / 8 of the broadcast dword, then bit b % 8 of it.
    for (int i = 0; i < 64; ++i) db(uint8_t((i % 32) / 8));
    for (int i = 0; i < 64; ++i) db(uint8_t(1u << (i % 8)));
    for (int i = 0; i < 64; ++i) db(uint8_t(quant::kIq4nlValues[i % 16] + (vnni_ ? 128 : 0)));
    for (int i = 0; i < 16; ++i) dd(std::bit_cast<uint32_t>(-1.0f / 128));
  }

  // One register tile: gc output groups x tc tokens at (kMg, kNt).
  void tile_body(int gc, int tc) {
    const int pc = gc * int(mult_);
    token_ptr_ = pointer_regs_ + pc;
    detail::emit_tile_pointers(*this, group_ptr_, pc, token_ptr_, tc, kMg, kNt, kTileStride, kGroupStride, kXStrideBytes);
    const int nacc = pc * int(halves_) * tc;
    if (facc_mem_) {
      vpxor_all(tmp_w());
      for (int a = 0; a < nacc; ++a) vmovups(facc_slot(a), tmp_w());
    } else {
      for (int a = 0; a < nacc; ++a) vpxor_all(vec(nacc + a));
    }
    if (!vnni_) {
      // Ones as int16 lanes, for vpmaddwd.
      vpcmpeqw_all(ones());
      vpsrlw(ones(), ones(), 15);
      if (avx512_) vpxord(zero(), zero(), zero());
    }

    // All groups side by side in one pass over K, or (sequential_groups) one
    // pass per group.
    const bool sequential = shape_.sequential_groups;
    for (int pass = 0; pass < (sequential ? pc : 1); ++pass) {
      g_first_ = sequential ? pass : 0;
      g_end_ = sequential ? pass + 1 : pc;
      k_loop(pc, tc, nacc, sequential ? 1 : pc);
    }
    g_first_ = 0;
    g_end_ = pc;
    // The fp32 sums in their registers, or loaded into the (now free) int
    // accumulator registers when they are in memory.
    store_tile(
        gc, tc,
        [&](int p, int h, int t) {
          const int a = acc_index(tc, p, h, t);
          if (!facc_mem_) return vec(nacc + a);
          vmovups(vec(a), facc_slot(a));
          return vec(a);
        },
        {tmp_w(), tmp_s(), tmp_t(), tmp_x()});
  }

  // One pass over K for the groups [g_first_, g_end_) of a tile of pc: the
  // next tile's (or, sequential, the next group's) streams are `ahead` groups on.
  void k_loop(int pc, int tc, int nacc, int ahead) {
    Label loop, done;
    xor_(woff_, woff_);
    xor_(xoff_, xoff_);
    if (shape_.prefetch_next_tile) {
      LUMEN_ASSERT(pc + tc < kTilePointerRegs, "matmul kernel: no register for the next tile's prefetch offset");
      mov(next_tile_off_, qword[rsp + kGroupStride]);
      imul(next_tile_off_, next_tile_off_, ahead);
    }
    cmp(xoff_, qword[rsp + kKEnd]);
    jae(done, T_NEAR);
    L(loop);
    // A super-block (IQ4_XS: 8 32-blocks) per iteration, unrolled.
    for (int b = 0; b < super_; ++b) {
      sub_ = b;
      xb_ = b * int(sizeof(ActBlock));
      block_step(tc, nacc);
    }
    sub_ = xb_ = 0;
    add(woff_, block_bytes_ * super_);
    if (shape_.prefetch_next_tile) add(next_tile_off_, block_bytes_ * super_);
    add(xoff_, int(sizeof(ActBlock)) * super_);
    cmp(xoff_, qword[rsp + kKEnd]);
    jb(loop, T_NEAR);
    L(done);
  }

  void vpxor_all(const Xmm& v) {
    if (avx512_) {
      vpxord(v, v, v);
    } else {
      vpxor(v, v, v);
    }
  }
  void vpcmpeqw_all(const Xmm& v) {
    if (avx512_) {
      vpternlogd(v, v, v, 0xFF);
    } else {
      vpcmpeqw(v, v, v);
    }
  }

  // One 32-block for the pass's groups of the tile: int dot products, then the
  // fp32 scale-and-accumulate.
  void block_step(int tc, int nacc) {
    for (int i = g_first_; i < g_end_; ++i) {
      for (int h = 0; h < halves_; ++h) {
        for (int t = 0; t < tc; ++t) {
          const Xmm acc = vec(acc_index(tc, i, h, t));
          if (q_offset(format_) != 0) {
            // sum(x*(q - offset)) = sum(x*q) + ActBlock::sum * offset / 128.
            vpbroadcastd(acc, dword[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, sum)]);
            vpsrad(acc, acc, q_offset(format_) == 16 ? 3 : 4);
          } else if (vnni_ && (!nibbles_ || levels_)) {
            vpbroadcastd(acc, dword[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, sum)]);
          } else {
            vpxor_all(acc);
          }
        }
      }
    }
    // Software prefetch of the block prefetch_bytes ahead on every weight
    // stream (or of the next tile's block): the zmm kernels issue its lines (Q8_0: 9) at once; the ymm
    // kernels, which take 4-7 instructions per 32 bytes, one line per 4-k step
    // and the rest with the last (6-9% faster GEMVs on AVX2, docs/kernels.md).
    // A super-block's lines are shared out among its 32-blocks.
    auto prefetch_addr = [&](int i, int line) {
      return shape_.prefetch_next_tile ? ptr[group_ptr_[i] + next_tile_off_ + 64 * line]
                                  : ptr[group_ptr_[i] + woff_ + int(shape_.prefetch_bytes) + 64 * line];
    };
    auto prefetch_line = [&](int line) {
      for (int i = g_first_; i < g_end_; ++i) prefetcht0(prefetch_addr(i, line));
    };
    const int super_lines = (block_bytes_ * super_ + 63) / 64;
    const int first_line = super_lines * sub_ / super_, end_line = super_lines * (sub_ + 1) / super_;
    if (levels_) {
      if (avx512_) {
        vmovdqu8(level_table(), nib_cst(kLevels));
      } else {
        vmovdqu(level_table(), nib_cst(kLevels));
      }
    }
    if (prefetches() && avx512_) {
      for (int i = g_first_; i < g_end_; ++i)
        for (int line = first_line; line < end_line; ++line) prefetcht0(prefetch_addr(i, line));
    }
    for (int j = 0; j < kQ8Block / 4; ++j) {
      if (prefetches() && !avx512_) {
        if (first_line + j < end_line) prefetch_line(first_line + j);
        if (j == kQ8Block / 4 - 1) {
          for (int line = first_line + j + 1; line < end_line; ++line) prefetch_line(line);  // Q8_0's ninth
        }
      }
      if (nibbles_) {
        nibble_step(tc, j);
        continue;
      }
      const int qoff = int(kPackedScaleBytes) + 64 * j;
      const int xq = int(offsetof(ActBlock, qs)) + 4 * j;
      if (x_in_regs(g_end_ - g_first_, tc)) {
        for (int t = 0; t < tc; ++t) vpbroadcastd(x_reg(t), ptr[token_ptr_[t] + xoff_ + xb_ + xq]);
      }
      for (int i = g_first_; i < g_end_; ++i) {
        for (int h = 0; h < halves_; ++h) {
          const Address w_addr = ptr[group_ptr_[i] + woff_ + qoff + vec_bytes() * h];
          const Xmm w = tmp_w();
          if (isa_ == Isa::AvxVnni) {
            vmovdqu(w, w_addr);
            for (int t = 0; t < tc; ++t) vpdpbusd(vec(acc_index(tc, i, h, t)), w, x_reg(t), VexEncoding);
          } else if (isa_ == Isa::Avx512Vnni) {
            vmovdqu8(w, w_addr);
            for (int t = 0; t < tc; ++t) {
              if (x_in_regs(g_end_ - g_first_, tc)) {
                vpdpbusd(vec(acc_index(tc, i, h, t)), w, x_reg(t));
              } else {
                vpdpbusd(vec(acc_index(tc, i, h, t)), w, ptr_b[token_ptr_[t] + xoff_ + xb_ + xq]);
              }
            }
          } else {
            if (avx512_) {
              vmovdqu8(w, w_addr);
            } else {
              vmovdqu(w, w_addr);
            }
            signed_dot(tc, i, h, w, xq);
          }
        }
      }
    }
    // fp32: acc_f += float(sum) * (w_scale * x_scale) (IQ4_XS: w_scale = d * (ls - 32)).
    for (int i = g_first_; i < g_end_; ++i) {
      for (int h = 0; h < halves_; ++h) {
        const Xmm s = tmp_s();
        vcvtph2ps(s, ptr[group_ptr_[i] + woff_ + 16 * h]);
        if (format_ == ops::DType::IQ4_XS) {
          // The 32-block's scale d * (ls - 32), exact in fp32.
          const Xmm ls = tmp_w();
          vpmovsxbd(ls, ptr[group_ptr_[i] + woff_ + int(kPackedIQ4_XSScaleOffset + kPackRows * sub_) + 8 * h]);
          vcvtdq2ps(ls, ls);
          vmulps(s, s, ls);
        }
        for (int t = 0; t < tc; ++t) {
          const Xmm scale = tmp_t();
          if (avx512_) {
            vmulps(scale, s, ptr_b[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, d)]);
          } else {
            vbroadcastss(scale, ptr[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, d)]);
            vmulps(scale, scale, s);
          }
          const int a = acc_index(tc, i, h, t);
          vcvtdq2ps(vec(a), vec(a));
          // In memory, the accumulator stays in vec(a) for the min term.
          const Xmm facc = facc_mem_ ? vec(a) : vec(nacc + a);
          if (facc_mem_) {
            vfmadd213ps(vec(a), scale, facc_slot(a));
          } else {
            vfmadd231ps(vec(nacc + a), vec(a), scale);
          }
          if (mins_) min_term(i, h, t, facc, scale);
          if (facc_mem_) vmovups(facc_slot(a), vec(a));
        }
      }
    }
  }

  // Q4_1, Q5_1: facc = fma(m * -1/128, float(ActBlock::sum) * x_scale, facc)
  // for (group i, half h, token t): m * sum(x) * x_scale, as the scalar
  // oracle orders it. Clobbers `scratch` (the scale, used) and tmp_w, tmp_x.
  void min_term(int i, int h, int t, const Xmm& facc, const Xmm& scratch) {
    const Xmm m = tmp_w(), sx = tmp_x();
    vcvtph2ps(m, ptr[group_ptr_[i] + woff_ + block_bytes_ - int(kPackedScaleBytes) + 16 * h]);
    vmulps(m, m, nib_cst(kMinFactor));
    const Address sum = ptr[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, sum)];
    const Address dx = ptr[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, d)];
    if (avx512_) {
      vcvtdq2ps(sx, ptr_b[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, sum)]);
      vmulps(sx, sx, ptr_b[token_ptr_[t] + xoff_ + xb_ + offsetof(ActBlock, d)]);
    } else {
      vbroadcastss(sx, sum);
      vcvtdq2ps(sx, sx);
      vbroadcastss(scratch, dx);
      vmulps(sx, sx, scratch);
    }
    vfmadd231ps(facc, m, sx);
  }

  // Non-VNNI int8 weights w (signed; clobbered) of (group i, half h) times
  // every token's dword at xq: |w| (u8) x (x negated where w < 0) with
  // vpmaddubsw (cannot saturate: 2*128*127 < 32768), then vpmaddwd by ones.
  void signed_dot(int tc, int i, int h, const Xmm& w, int xq) {
    if (avx512_) {
      vpmovb2m(k2, w);
      vpabsb(w, w);
      for (int t = 0; t < tc; ++t) {
        const Xmm sx = tmp_x();
        vpbroadcastd(sx, ptr[token_ptr_[t] + xoff_ + xb_ + xq]);
        vpsubb(sx | k2, zero(), sx);
        vpmaddubsw(sx, w, sx);
        vpmaddwd(sx, sx, ones());
        const Xmm acc = vec(acc_index(tc, i, h, t));
        vpaddd(acc, acc, sx);
      }
      return;
    }
    const Xmm aw = tmp_s();
    vpabsb(aw, w);
    for (int t = 0; t < tc; ++t) {
      const Xmm sx = tmp_x();
      vpbroadcastd(sx, ptr[token_ptr_[t] + xoff_ + xb_ + xq]);
      vpsignb(sx, sx, w);
      vpmaddubsw(sx, aw, sx);
      vpmaddwd(sx, sx, ones());
      const Xmm acc = vec(acc_index(tc, i, h, t));
      vpaddd(acc, acc, sx);
    }
  }

  // The 4-k step j of a 4-bit format: the weight bytes of nibble half j % 2
  // of vector j / 2 (plus Q5_0's fifth bits), times every token's dword j.
  void nibble_step(int tc, int j) {
    const int qoff = int(packed_nibble_offset(format_, sub_)) + 64 * (j / 2);
    const int hoff = int(kPackedHighBitOffset) + 8 * j;
    const int xq = int(offsetof(ActBlock, qs)) + 4 * j;
    if (x_in_regs(g_end_ - g_first_, tc)) {
      for (int t = 0; t < tc; ++t) vpbroadcastd(x_reg(t), ptr[token_ptr_[t] + xoff_ + xb_ + xq]);
    }
    for (int i = g_first_; i < g_end_; ++i) {
      for (int h = 0; h < halves_; ++h) {
        const Xmm w = tmp_w();
        const Address w_addr = ptr[group_ptr_[i] + woff_ + qoff + vec_bytes() * h];
        if (avx512_) {
          vmovdqu8(w, w_addr);
        } else {
          vmovdqu(w, w_addr);
        }
        if (j % 2) vpsrlw(w, w, 4);
        if (avx512_) {
          vpandd(w, w, nib_cst(kNibbleMask));
        } else {
          vpand(w, w, nib_cst(kNibbleMask));
        }
        if (has_fifth_bits(format_)) {
          if (avx512_) {
            kmovq(k2, qword[group_ptr_[i] + woff_ + hoff]);
            vpaddb(w | k2, w, nib_cst(kSixteen));
          } else {
            const Xmm hb = high_bits();
            vpbroadcastd(hb, dword[group_ptr_[i] + woff_ + hoff + 4 * h]);
            vpshufb(hb, hb, nib_cst(kBitShuffle));
            vpand(hb, hb, nib_cst(kBitSelect));
            vpcmpeqb(hb, hb, nib_cst(kBitSelect));
            vpand(hb, hb, nib_cst(kSixteen));
            vpor(w, w, hb);
          }
        }
        if (levels_) {
          vpshufb(w, level_table(), w);
          if (!vnni_) {
            signed_dot(tc, i, h, w, xq);
            continue;
          }
        }
        for (int t = 0; t < tc; ++t) {
          const Xmm acc = vec(acc_index(tc, i, h, t));
          if (isa_ == Isa::AvxVnni) {
            vpdpbusd(acc, w, x_reg(t), VexEncoding);
          } else if (isa_ == Isa::Avx512Vnni) {
            if (x_in_regs(g_end_ - g_first_, tc)) {
              vpdpbusd(acc, w, x_reg(t));
            } else {
              vpdpbusd(acc, w, ptr_b[token_ptr_[t] + xoff_ + xb_ + xq]);
            }
          } else {
            // u8 q (< 32) x s8 x: vpmaddubsw cannot saturate (2*31*128 < 32768).
            const Xmm sx = tmp_x();
            vpbroadcastd(sx, ptr[token_ptr_[t] + xoff_ + xb_ + xq]);
            vpmaddubsw(sx, w, sx);
            vpmaddwd(sx, sx, ones());
            vpaddd(acc, acc, sx);
          }
        }
      }
    }
  }

  Isa isa_;
  program::KernelId kernel_;
  KernelShape shape_;
  bool avx512_ = true;
  bool vnni_ = true;
  int64_t mult_ = 1;
  bool facc_mem_ = false;
  ops::DType format_ = ops::DType::Q8_0;
  bool nibbles_ = false;   // a 4-bit format (packed_4bit.h)
  bool levels_ = false;    // IQ4_NL, IQ4_XS: q indexes kIq4nlValues
  int super_ = 1;          // 32-blocks per k-loop iteration (packed_super_blocks)
  int sub_ = 0, xb_ = 0;   // the 32-block of the iteration being emitted; its ActBlock's byte offset
  int g_first_ = 0, g_end_ = 0;  // the packed groups of the pass over K being emitted
  bool mins_ = false;      // Q4_1, Q5_1: d * q + m
  int block_bytes_ = 0;    // packed_block_bytes(format_)
  Label nibble_consts_;
};

}  // namespace

std::vector<uint8_t> generate_matmul_kernel(Isa isa, const program::KernelId& kernel, const KernelShape& shape) {
  if (is_float_kernel(kernel)) return generate_float_kernel(isa, kernel, shape);
  MatMulGenerator gen(isa, kernel, shape);
  const uint8_t* code = gen.getCode();
  return std::vector<uint8_t>(code, code + gen.getSize());
}

std::vector<uint8_t> generate_matmul_kernel(Isa isa, const program::KernelId& kernel, CpuTune tune) {
  if (is_kquant_kernel(kernel)) return generate_kquant_kernel(isa, kernel, tune);
  return generate_matmul_kernel(isa, kernel, kernel_shape(isa, kernel, tune));
}

}  // namespace lumen::codegen
