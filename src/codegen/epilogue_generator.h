// Internal to codegen: what the Q8_0/4-bit and the float matmul generators
// share, the argument offsets and the epilogue (SiLU, bias, residual, the
// masked stores of rows past m_rows), emitted by one piece of code.
#pragma once

#include <xbyak/xbyak.h>

#include <bit>
#include <cstddef>
#include <functional>
#include <vector>

#include "lumen/program/program.h"
#include "lumen/target/isa.h"
#include "lumen/target/kernel_abi.h"
#include "lumen/target/kernel_registers.h"

namespace lumen::codegen::detail {

// MatMulArgs field offsets (kernel_abi.h), as the kernels address them.
constexpr int kArgW = offsetof(MatMulArgs, w), kArgX = offsetof(MatMulArgs, x), kArgY = offsetof(MatMulArgs, y),
              kArgBias = offsetof(MatMulArgs, bias), kArgResidual = offsetof(MatMulArgs, residual),
              kArgXStride = offsetof(MatMulArgs, x_stride), kArgYStride = offsetof(MatMulArgs, y_stride),
              kArgRStride = offsetof(MatMulArgs, r_stride), kArgKBlocks = offsetof(MatMulArgs, k_blocks),
              kArgMRows = offsetof(MatMulArgs, m_rows), kArgNTokens = offsetof(MatMulArgs, n_tokens);
// The kernels load every pointer and count as a qword.
static_assert(sizeof(MatMulArgs::w) == 8 && sizeof(MatMulArgs::x) == 8 && sizeof(MatMulArgs::y) == 8 &&
              sizeof(MatMulArgs::bias) == 8 && sizeof(MatMulArgs::residual) == 8 &&
              sizeof(MatMulArgs::x_stride) == 8 && sizeof(MatMulArgs::y_stride) == 8 &&
              sizeof(MatMulArgs::r_stride) == 8 && sizeof(MatMulArgs::k_blocks) == 8 &&
              sizeof(MatMulArgs::m_rows) == 8 && sizeof(MatMulArgs::n_tokens) == 8);

// The register-tile loop's dispatch, one piece of code for every generator:
// the tile at row group [rsp + mg_slot] and token [rsp + nt_slot] has
// min(groups, groups left) groups and min(tokens, tokens before token_end)
// tokens; a compare chain jumps to the unrolled body of that size, and every
// body (tile_body(gc, tc)) ends in a jump to n_next. Clobbers rax, rcx, rdx.
inline void emit_tile_bodies(Xbyak::CodeGenerator& g, int groups, int tokens, int groups_total_slot, int mg_slot,
                             int nt_slot, const Xbyak::Address& token_end, const Xbyak::Label& n_next,
                             const std::function<void(int, int)>& tile_body) {
  using namespace Xbyak::util;
  g.mov(rax, g.qword[rsp + groups_total_slot]);
  g.sub(rax, g.qword[rsp + mg_slot]);
  g.mov(rcx, groups);
  g.cmp(rax, rcx);
  g.cmovg(rax, rcx);
  g.mov(rdx, token_end);
  g.sub(rdx, g.qword[rsp + nt_slot]);
  g.mov(rcx, tokens);
  g.cmp(rdx, rcx);
  g.cmovg(rdx, rcx);
  std::vector<Xbyak::Label> bodies(static_cast<size_t>(groups * tokens));
  for (int gc = groups; gc >= 1; --gc) {
    Xbyak::Label next_g;
    g.cmp(rax, gc);
    g.jne(next_g, Xbyak::CodeGenerator::T_NEAR);
    for (int tc = tokens; tc >= 1; --tc) {
      g.cmp(rdx, tc);
      g.je(bodies[static_cast<size_t>((gc - 1) * tokens + (tc - 1))], Xbyak::CodeGenerator::T_NEAR);
    }
    g.jmp(n_next, Xbyak::CodeGenerator::T_NEAR);
    g.L(next_g);
  }
  g.jmp(n_next, Xbyak::CodeGenerator::T_NEAR);
  for (int gc = 1; gc <= groups; ++gc) {
    for (int tc = 1; tc <= tokens; ++tc) {
      g.L(bodies[static_cast<size_t>((gc - 1) * tokens + (tc - 1))]);
      tile_body(gc, tc);
      g.jmp(n_next, Xbyak::CodeGenerator::T_NEAR);
    }
  }
}

// A register tile's pointers: packed group i of the tile at
// w + [rsp + mg_slot] * [rsp + tile_stride_slot] + i * [rsp + group_stride_slot],
// token t at x + ([rsp + nt_slot] + t) * [rsp + x_stride_slot] (x: the
// args' activation pointer).
inline void emit_tile_pointers(Xbyak::CodeGenerator& g, const Xbyak::Reg64* group_ptr, int groups,
                               const Xbyak::Reg64* token_ptr, int tokens, int mg_slot, int nt_slot,
                               int tile_stride_slot, int group_stride_slot, int x_stride_slot) {
  using namespace Xbyak::util;
  g.mov(group_ptr[0], g.qword[rsp + mg_slot]);
  g.imul(group_ptr[0], g.qword[rsp + tile_stride_slot]);
  g.add(group_ptr[0], g.qword[rdi + kArgW]);
  for (int i = 1; i < groups; ++i) {
    g.mov(group_ptr[i], group_ptr[i - 1]);
    g.add(group_ptr[i], g.qword[rsp + group_stride_slot]);
  }
  g.mov(token_ptr[0], g.qword[rsp + nt_slot]);
  g.imul(token_ptr[0], g.qword[rsp + x_stride_slot]);
  g.add(token_ptr[0], g.qword[rdi + kArgX]);
  for (int t = 1; t < tokens; ++t) {
    g.mov(token_ptr[t], token_ptr[t - 1]);
    g.add(token_ptr[t], g.qword[rsp + x_stride_slot]);
  }
}

// The stack slots (bytes from rsp) of the chunked tile loop below.
struct TileLoopSlots {
  int mg, nt, groups_total, k_end, chunk, chunk_start, chunk_end;
};

// The Q8_0/4-bit and the float kernels' loops over token chunks, row tiles
// and token tiles. Tokens go in chunks whose activations ([rsp + k_end] bytes
// per token) fit in chunk_act_bytes (0: one chunk), rounded down to whole
// token tiles, so that every row tile re-reads them from L2; then
// emit_tile_bodies for each tile. Clobbers rax, rcx, rdx.
inline void emit_chunked_tile_loop(Xbyak::CodeGenerator& g, int groups, int tokens, int64_t chunk_act_bytes,
                                   const TileLoopSlots& s, const std::function<void(int, int)>& tile_body) {
  using namespace Xbyak::util;
  using Xbyak::Label;
  constexpr auto kNear = Xbyak::CodeGenerator::T_NEAR;
  Label chunk_ok, chunk_loop, m_loop, n_loop, n_next;
  g.mov(rax, chunk_act_bytes > 0 ? chunk_act_bytes : int64_t(1) << 62);
  g.mov(rcx, g.qword[rsp + s.k_end]);
  g.test(rcx, rcx);
  g.jz(chunk_ok);
  g.xor_(edx, edx);
  g.div(rcx);
  g.xor_(edx, edx);
  g.mov(rcx, tokens);
  g.div(rcx);
  g.imul(rax, rcx);
  g.cmp(rax, rcx);
  g.cmovl(rax, rcx);
  g.L(chunk_ok);
  g.mov(g.qword[rsp + s.chunk], rax);
  g.mov(g.qword[rsp + s.chunk_start], 0);

  g.L(chunk_loop);
  // chunk_end = min(chunk_start + chunk, n_tokens)
  g.mov(rax, g.qword[rsp + s.chunk_start]);
  g.add(rax, g.qword[rsp + s.chunk]);
  g.mov(rcx, g.qword[rdi + kArgNTokens]);
  g.cmp(rax, rcx);
  g.cmovg(rax, rcx);
  g.mov(g.qword[rsp + s.chunk_end], rax);
  g.mov(g.qword[rsp + s.mg], 0);
  g.L(m_loop);
  g.mov(rax, g.qword[rsp + s.chunk_start]);
  g.mov(g.qword[rsp + s.nt], rax);
  g.L(n_loop);
  emit_tile_bodies(g, groups, tokens, s.groups_total, s.mg, s.nt, g.qword[rsp + s.chunk_end], n_next, tile_body);
  g.L(n_next);
  g.mov(rax, g.qword[rsp + s.nt]);
  g.add(rax, tokens);
  g.mov(g.qword[rsp + s.nt], rax);
  g.cmp(rax, g.qword[rsp + s.chunk_end]);
  g.jl(n_loop, kNear);
  g.mov(rax, g.qword[rsp + s.mg]);
  g.add(rax, groups);
  g.mov(g.qword[rsp + s.mg], rax);
  g.cmp(rax, g.qword[rsp + s.groups_total]);
  g.jl(m_loop, kNear);
  g.mov(rax, g.qword[rsp + s.chunk_end]);
  g.mov(g.qword[rsp + s.chunk_start], rax);
  g.cmp(rax, g.qword[rdi + kArgNTokens]);
  g.jl(chunk_loop, kNear);
}

// A generator whose kernels end in the matmul epilogue. The args pointer is
// rdi; the tile's first row group and token are qwords at [rsp + mg_slot] and
// [rsp + nt_slot].
class EpilogueGenerator : public Xbyak::CodeGenerator {
 protected:
  EpilogueGenerator(Isa isa, program::Epilogue epilogue, int mg_slot, int nt_slot)
      : CodeGenerator(1 << 20),
        zmm_(!is_ymm_isa(isa)),
        halves_(int(vectors_per_group(isa))),
        epi_(epilogue),
        mg_slot_(mg_slot),
        nt_slot_(nt_slot) {}

  Xbyak::Xmm vec(int i) const { return zmm_ ? Xbyak::Xmm(Xbyak::Zmm(i)) : Xbyak::Xmm(Xbyak::Ymm(i)); }

  // SiLU's constants (64 bytes each) and the ymm row masks; once per kernel, after its code.
  void emit_epilogue_constants() {
    const float values[kNumConsts] = {
        -0.0f,          88.3762626647949f, -87.3365447504f, 1.44269504088896341f, 0.693359375f,
        -2.12194440e-4f, 1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,      4.1665795894e-2f,
        1.6666665459e-1f, 5.0000001201e-1f, 1.0f};
    align(64);
    L(consts_);
    for (int c = 0; c < kNumConsts; ++c) {
      for (int i = 0; i < 16; ++i) dd(std::bit_cast<uint32_t>(values[c]));
    }
    L(row_masks_);  // 8 x -1 then 8 x 0: loading at (8 - n) * 4 gives n leading ones
    for (int i = 0; i < 16; ++i) dd(i < 8 ? 0xFFFFFFFFu : 0u);
  }

  // Stores the tile of gc output row groups x tc tokens: result(p, h, t) puts
  // the fp32 sums of packed group p (SiluMul: gate 2g, up 2g + 1), vector half
  // h and token t in a register (emitting a load if they are in memory) and
  // returns it; then SiLU(gate) * up, + bias, + residual, and a store masked to
  // m_rows. `temps` are 4 vector registers free for it. Clobbers r8-r11, rbx,
  // rdx and k1.
  void store_tile(int gc, int tc, const std::function<Xbyak::Xmm(int, int, int)>& result, const Xbyak::Xmm (&temps)[4]) {
    using namespace Xbyak::util;
    using program::Epilogue;
    const Xbyak::Reg64 args = rdi;
    const int mult = epi_ == Epilogue::SiluMul ? 2 : 1;
    const bool bias = epi_ == Epilogue::Bias || epi_ == Epilogue::BiasResidual;
    const bool residual = epi_ == Epilogue::Residual || epi_ == Epilogue::BiasResidual;
    const Xbyak::Reg64 y_ptr = r8, b_ptr = r9, r_ptr = r10, rows = r11, tmp = rbx;
    // b_ptr = bias + mg*16 rows.
    if (bias) {
      mov(b_ptr, qword[rsp + mg_slot_]);
      shl(b_ptr, 6);
      add(b_ptr, qword[args + kArgBias]);
    }
    for (int g = 0; g < gc; ++g) {
      // rows = clamp(m_rows - (mg + g) * 16, 0, 16): the rows of this group to store.
      mov(rows, qword[rsp + mg_slot_]);
      add(rows, g);
      shl(rows, 4);
      neg(rows);
      add(rows, qword[args + kArgMRows]);
      mov(tmp, 16);
      cmp(rows, tmp);
      cmovg(rows, tmp);
      for (int h = 0; h < halves_; ++h) {
        const Xbyak::Xmm mask = temps[0];
        if (zmm_) {
          mov(tmp.cvt32(), 0xFFFF);
          bzhi(tmp.cvt32(), tmp.cvt32(), rows.cvt32());
          kmovw(k1, tmp.cvt32());
        } else {
          // n = clamp(rows - 8h, 0, 8); mask = row_masks[8 - n ..].
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
        const int row_byte = (g * int(kPackRows) + h * 8) * 4;
        for (int t = 0; t < tc; ++t) {
          // y_ptr = y + ((nt + t) * y_stride + mg * 16) floats.
          mov(y_ptr, qword[rsp + nt_slot_]);
          add(y_ptr, t);
          if (residual) {
            mov(r_ptr, y_ptr);
            imul(r_ptr, qword[args + kArgRStride]);
          }
          imul(y_ptr, qword[args + kArgYStride]);
          mov(tmp, qword[rsp + mg_slot_]);
          shl(tmp, 4);
          add(y_ptr, tmp);
          shl(y_ptr, 2);
          add(y_ptr, qword[args + kArgY]);
          if (residual) {
            add(r_ptr, tmp);
            shl(r_ptr, 2);
            add(r_ptr, qword[args + kArgResidual]);
          }
          const Xbyak::Xmm v = result(g * mult, h, t);
          if (epi_ == Epilogue::SiluMul) {
            const Xbyak::Xmm up = result(g * 2 + 1, h, t);
            const Xbyak::Xmm e = temps[3];
            exp_neg(v, e, temps[1], temps[2]);
            vaddps(e, e, cst(kOne));
            vdivps(v, v, e);
            vmulps(v, v, up);
          }
          if (bias) add_masked(v, ptr[b_ptr + row_byte], mask, temps[1]);
          if (residual) add_masked(v, ptr[r_ptr + row_byte], mask, temps[1]);
          if (zmm_) {
            vmovups(ptr[y_ptr + row_byte] | k1, v);
          } else {
            vmaskmovps(ptr[y_ptr + row_byte], mask, v);
          }
        }
      }
    }
  }

  bool zmm_ = true;
  int halves_ = 1;
  program::Epilogue epi_;

 private:
  // SiLU's constants, each replicated over 16 lanes (64 bytes).
  enum Const { kSignMask, kExpHi, kExpLo, kLog2e, kLn2Hi, kLn2Lo, kP0, kP1, kP2, kP3, kP4, kP5, kOne, kNumConsts };
  Xbyak::Address cst(Const c) { return Xbyak::util::ptr[Xbyak::util::rip + consts_ + 64 * int(c)]; }

  // exp(-g) into e (clobbers z and n): Cephes-style range reduction and
  // polynomial, ~1-2 ulp.
  void exp_neg(const Xbyak::Xmm& g, const Xbyak::Xmm& e, const Xbyak::Xmm& z, const Xbyak::Xmm& n) {
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

  void add_masked(const Xbyak::Xmm& v, const Xbyak::Address& addr, const Xbyak::Xmm& mask, const Xbyak::Xmm& t) {
    if (zmm_) {
      vmovups(t | Xbyak::util::k1 | Xbyak::util::T_z, addr);
    } else {
      vmaskmovps(t, mask, addr);
    }
    vaddps(v, v, t);
  }

  int mg_slot_, nt_slot_;
  Xbyak::Label consts_, row_masks_;
};

}  // namespace lumen::codegen::detail
