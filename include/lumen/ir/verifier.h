// The IR verifier: structural and type rules every pass must preserve. It
// runs after the lowering and after every pass (lumenc and the tests).
#pragma once

#include <string>
#include <vector>

#include "lumen/ir/ir.h"

namespace lumen::ir {

// The problems found, one line each ("%7 (matmul): ..."); empty when the
// module is well formed. With `require_types`, open result types are errors
// (true after infer_shapes).
std::vector<std::string> verify(const Module& m, bool require_types = true);
// Throws IrError listing the problems (first one in the message) when any.
void verify_or_throw(const Module& m, bool require_types = true);

}  // namespace lumen::ir
