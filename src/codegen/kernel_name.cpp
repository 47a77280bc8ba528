// Parsing of program::kernel_name() strings back into what the generator
// needs, and the per-ISA register tile the generator really uses.
#include <charconv>
#include <stdexcept>
#include <string>

#include "lumen/codegen/kernel_support.h"

namespace lumen::codegen {
namespace {

using program::Epilogue;

constexpr Epilogue kEpilogues[] = {Epilogue::None, Epilogue::Bias, Epilogue::Residual,
                                   Epilogue::BiasResidual, Epilogue::SiluMul};

bool parse_int(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

[[noreturn]] void bad_name(const std::string& name, const char* why) {
  throw std::invalid_argument("unknown matmul kernel name '" + name + "': " + why);
}

}  // namespace

const char* epilogue_name(Epilogue e) { return program::to_string(e); }

KernelSpec parse_kernel_name(const std::string& name) {
  KernelSpec spec;
  std::string_view rest = name;
  if (rest.starts_with("gemv.")) {
    rest.remove_prefix(5);
  } else if (rest.starts_with("gemm.")) {
    spec.prefill = true;
    rest.remove_prefix(5);
  } else {
    bad_name(name, "expected gemv.<epilogue> or gemm.<epilogue>.m<M>n<N>");
  }
  std::string_view epi = rest, tiles;
  if (spec.prefill) {
    const size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos) bad_name(name, "missing .m<M>n<N> tile");
    epi = rest.substr(0, dot);
    tiles = rest.substr(dot + 1);
  }
  bool found = false;
  for (Epilogue e : kEpilogues) {
    if (epi == epilogue_name(e)) {
      spec.epilogue = e;
      found = true;
    }
  }
  if (!found) bad_name(name, "unknown epilogue");
  if (spec.prefill) {
    const size_t n_pos = tiles.find('n');
    if (!tiles.starts_with('m') || n_pos == std::string_view::npos ||
        !parse_int(tiles.substr(1, n_pos - 1), spec.tile_m) ||
        !parse_int(tiles.substr(n_pos + 1), spec.tile_n)) {
      bad_name(name, "malformed tile, expected m<M>n<N>");
    }
    if (spec.tile_m < kPackRows || spec.tile_m % kPackRows != 0 || spec.tile_m > 1024) {
      bad_name(name, "tile_m must be a multiple of 16 in [16, 1024]");
    }
    if (spec.tile_n < 1 || spec.tile_n > 64) bad_name(name, "tile_n must be in [1, 64]");
  }
  return spec;
}

std::string format_kernel_name(const KernelSpec& spec) {
  std::string name = spec.prefill ? "gemm." : "gemv.";
  name += epilogue_name(spec.epilogue);
  if (spec.prefill) name += ".m" + std::to_string(spec.tile_m) + "n" + std::to_string(spec.tile_n);
  return name;
}

KernelShape kernel_shape(Isa isa, const KernelSpec& spec) {
  // Accumulators (one int + one float vector per packed group, vector half and
  // token) must fit beside the temporaries: see generate_matmul_kernel.
  const int64_t halves = isa == Isa::Avx2 ? 2 : 1;
  const int64_t max_acc = isa == Isa::Avx512Vnni ? 14 : isa == Isa::Avx512 ? 13 : 5;
  const int64_t mult = spec.epilogue == program::Epilogue::SiluMul ? 2 : 1;
  // One pointer register per packed group and per token, 12 in all.
  constexpr int64_t kMaxPackedGroups = 4;
  constexpr int64_t kMaxTokens = 8;
  constexpr int64_t kGemvPackedGroups = 4;
  KernelShape shape;
  if (!spec.prefill) {
    shape.tokens = 1;
    shape.groups = std::max<int64_t>(1, std::min(kGemvPackedGroups, max_acc / halves) / mult);
    // Four blocks ahead on every weight stream: end to end decode at 1 and 2
    // threads gained 4-5% over no software prefetch (docs/kernels.md).
    shape.prefetch_bytes = 4 * kPackedBlockBytes;
    return shape;
  }
  // Within the asked tile, the largest groups x tokens that fits (the most
  // register reuse), more tokens on a tie: AVX2 turns m48n4 into m16n2, whose
  // weights serve two tokens, not m32n1 (15% slower on the QKV shape).
  const int64_t asked_groups = std::min(spec.tile_m / kPackRows, kMaxPackedGroups / mult);
  const int64_t asked_tokens = std::min(spec.tile_n, kMaxTokens);
  shape.groups = 1;
  shape.tokens = 1;
  for (int64_t g = 1; g <= asked_groups; ++g) {
    for (int64_t t = 1; t <= asked_tokens; ++t) {
      if (g * mult * halves * t > max_acc) continue;
      if (g * t > shape.groups * shape.tokens || (g * t == shape.groups * shape.tokens && t > shape.tokens)) {
        shape.groups = g;
        shape.tokens = t;
      }
    }
  }
  return shape;
}

}  // namespace lumen::codegen
