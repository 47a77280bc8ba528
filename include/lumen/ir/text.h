// The stable text form of the IR: print_module() writes it, parse_module()
// reads it back, and parse_module(print_module(m)) prints identically.
// Values are renumbered %0, %1, ... in order of definition when printed.
//
//   module qwen2 source "qwen2.dsl"
//   param n_embd : int = key("qwen2.embedding_length")
//   weight @wq[l] : q8_0[n_embd, n_embd] = "blk.{i}.attn_q.weight"
//   func @forward(%0 : i32[N]) -> f32[1, n_vocab] {
//     %1 = embed %0, @tok_embd : (i32[N]) -> f32[N, n_embd]
//     %2 = layers n_layer iter(%3 = %1 : f32[N, n_embd]) {
//       %7 = matmul %5, @wq[l] : (act_q8[N, n_embd]) -> f32[N, n_embd] {epilogue = bias(@bq[l])}
//       yield %20
//     }
//     return %30
//   }
//
// The grammar is in docs/architecture.md.
#pragma once

#include <string>
#include <string_view>

#include "lumen/ir/ir.h"

namespace lumen::ir {

std::string print_module(const Module& m);
// Throws IrError("line L: message") on malformed text.
Module parse_module(std::string_view text);

}  // namespace lumen::ir
