// KernelId's one printer and one parser (see program.h).
#include <charconv>

#include "lumen/program/program.h"
#include "lumen/target/kernel_registers.h"
#include "lumen/target/packed_kquant.h"
#include "lumen/target/packed_q8_0.h"
#include "lumen/target/weight_formats.h"

namespace lumen::program {
namespace {

constexpr Epilogue kEpilogues[] = {Epilogue::None, Epilogue::Bias, Epilogue::Residual, Epilogue::BiasResidual,
                                   Epilogue::SiluMul};

bool parse_int(std::string_view text, int64_t& out) {
  if (text.empty()) return false;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::optional<KernelId> refuse(std::string* why, const char* reason) {
  if (why) *why = reason;
  return std::nullopt;
}

}  // namespace

const char* to_string(KernelKind k) {
  switch (k) {
    case KernelKind::Gemv: return "gemv";
    case KernelKind::Gemm: return "gemm";
    case KernelKind::Batch: return "batch";
  }
  return "?";
}

std::string to_string(const KernelId& k) {
  std::string text = std::string(to_string(k.kind)) + ".";
  if (k.weight != DType::Q8_0) text += std::string(to_string(k.weight)) + ".";
  text += to_string(k.epilogue);
  if (k.kind == KernelKind::Gemm) text += ".m" + std::to_string(k.tile_m) + "n" + std::to_string(k.tile_n);
  return text;
}

bool is_valid(const KernelId& k, std::string* why) {
  auto refuse_with = [why](const char* reason) {
    if (why) *why = reason;
    return false;
  };
  if (!is_packed_format(k.weight)) return refuse_with("the weight is not a packed format");
  if (k.kind == KernelKind::Gemv) {
    if (k.tile_m != KernelId::kGemvTileM || k.tile_n != KernelId::kGemvTileN)
      return refuse_with("a gemv kernel has no tile of its own");
    return true;
  }
  if (k.kind == KernelKind::Batch) {
    if (k.tile_m != KernelId::kBatchTileM || k.tile_n != KernelId::kBatchMaxTokens)
      return refuse_with("a batch kernel has no tile of its own");
    return true;
  }
  if (k.weight != DType::Q8_0 && !has_expanded_kquant(k.weight) && !is_float_format(k.weight))
    return refuse_with("a gemm kernel reads packed q8_0, expanded blocks (k-quants, q4_1, q5_1) or packed f16, bf16, f32");
  // A Gemm's row tile is whole packed row groups.
  if (k.tile_m < kPackRows || k.tile_m % kPackRows != 0 || k.tile_m > 1024)
    return refuse_with("tile_m must be a multiple of 16 in [16, 1024]");
  if (k.tile_n < 1 || k.tile_n > 64) return refuse_with("tile_n must be in [1, 64]");
  return true;
}

bool fits(const KernelId& k, Isa isa, std::string* why) {
  if (!is_valid(k, why)) return false;
  if (k.kind != KernelKind::Gemm) return true;
  const int64_t packed_groups = k.tile_m / kPackRows * (k.epilogue == Epilogue::SiluMul ? 2 : 1);
  if (is_float_format(k.weight) ? float_tile_fits(isa, packed_groups, k.tile_n)
      : has_expanded_kquant(k.weight)
          ? kquant_gemm_tile_fits(isa, packed_groups, k.tile_n, kquant_int_accumulators(k.weight))
          : gemm_tile_fits(isa, packed_groups, k.tile_n))
    return true;
  if (why) *why = std::string("the tile does not fit the registers of ") + to_string(isa);
  return false;
}

std::optional<KernelId> parse_kernel_id(std::string_view text, std::string* why) {
  KernelId k;
  std::string_view rest = text;
  if (rest.starts_with("gemv.")) {
    k.kind = KernelKind::Gemv;
  } else if (rest.starts_with("gemm.")) {
    k.kind = KernelKind::Gemm;
  } else if (rest.starts_with("batch.")) {
    k = KernelId::batch(Epilogue::None);
  } else {
    return refuse(why, "expected gemv[.<weight>].<epilogue>, batch[.<weight>].<epilogue> or gemm[.<weight>].<epilogue>.m<M>n<N>");
  }
  rest.remove_prefix(std::string_view(to_string(k.kind)).size() + 1);
  // An optional weight format: no epilogue's name is a type's name.
  if (const size_t dot = rest.find('.'); dot != std::string_view::npos) {
    if (const std::optional<DType> w = ops::parse_dtype(rest.substr(0, dot))) {
      k.weight = *w;
      rest.remove_prefix(dot + 1);
    }
  }
  std::string_view epilogue = rest, tile;
  if (k.kind == KernelKind::Gemm) {
    const size_t dot = rest.rfind('.');
    if (dot == std::string_view::npos) return refuse(why, "missing .m<M>n<N> tile");
    epilogue = rest.substr(0, dot);
    tile = rest.substr(dot + 1);
  }
  bool known = false;
  for (Epilogue e : kEpilogues) {
    if (epilogue == to_string(e)) {
      k.epilogue = e;
      known = true;
    }
  }
  if (!known) return refuse(why, "unknown epilogue");
  if (k.kind == KernelKind::Gemm) {
    const size_t n_at = tile.find('n');
    if (!tile.starts_with('m') || n_at == std::string_view::npos || !parse_int(tile.substr(1, n_at - 1), k.tile_m) ||
        !parse_int(tile.substr(n_at + 1), k.tile_n))
      return refuse(why, "malformed tile, expected m<M>n<N>");
  }
  std::string invalid;
  if (!is_valid(k, &invalid)) {
    if (why) *why = invalid;
    return std::nullopt;
  }
  // Only the printer's own spelling: "m048n4" would name the same kernel twice.
  if (to_string(k) != text) return refuse(why, "not in canonical form");
  return k;
}

std::string kernel_symbol(const KernelId& k) {
  std::string symbol = "lumen_" + to_string(k);
  for (char& c : symbol)
    if (c == '.') c = '_';
  return symbol;
}

}  // namespace lumen::program
