// The DSL parser: tokens -> AST (recursive descent, one function per grammar
// rule; the full grammar is in docs/dsl.md). Syntax errors are reported to
// `diags`; the parser then skips to the next line that starts a declaration
// or statement, so one run reports several independent errors.
#pragma once

#include <memory>
#include <vector>

#include "lumen/common/diagnostics.h"
#include "lumen/dsl/ast.h"
#include "lumen/dsl/lexer.h"

namespace lumen::dsl {

// Nesting deeper than this (parentheses, calls, unary operators) is an error,
// so that hostile input cannot exhaust the stack.
constexpr int kMaxExprDepth = 256;

// Returns the module (possibly partial when errors were reported). `tokens`
// must end with an End token, as lex() produces.
std::unique_ptr<ast::Module> parse(std::string_view filename, const std::vector<Token>& tokens,
                                   DiagnosticEngine& diags);

}  // namespace lumen::dsl
