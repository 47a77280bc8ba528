// Semantic analysis of a parsed DSL module: name resolution, scalar and
// tensor typing with symbolic shapes, op signatures (arity, keyword
// arguments), declaration rules (duplicates, use before definition, layer
// indexing, "{arch}"/"{i}" placeholders) and unused-weight warnings. Fills
// the "sema" fields of the AST (see ast.h).
//
// Symbolic dims are compared by evaluating both sides on a few deterministic
// sample bindings of the params that satisfy every `check` (so head_dim *
// n_head equals n_embd when the program checks n_embd % n_head == 0).
#pragma once

#include "lumen/common/diagnostics.h"
#include "lumen/dsl/ast.h"

namespace lumen::dsl {

// Returns true when no errors were reported (warnings are fine).
bool check(ast::Module& module, DiagnosticEngine& diags);

}  // namespace lumen::dsl
