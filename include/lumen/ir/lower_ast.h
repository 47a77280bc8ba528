// Lowering of a checked DSL module (dsl/ast.h) to the tensor IR: params,
// checks and weights carry over; the forward body becomes SSA ops (names
// rebound by assignment get fresh values, and names rebound inside the
// layer loop become loop-carried values). Result types are left open for
// the infer_shapes pass.
#pragma once

#include <optional>

#include "lumen/common/diagnostics.h"
#include "lumen/dsl/ast.h"
#include "lumen/ir/ir.h"

namespace lumen::ir {

// Returns the IR, or nullopt after reporting to `diags` what the IR cannot
// express (e.g. rms_norm's eps given as a literal instead of a param).
// `ast` must have passed dsl::parse_and_check without errors.
std::optional<Module> lower_ast(const dsl::ast::Module& ast, DiagnosticEngine& diags);

}  // namespace lumen::ir
