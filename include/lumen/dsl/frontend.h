// The DSL front end's single entry point: source text -> checked AST.
// Lexing, parsing and semantic analysis run in order; every user mistake
// becomes a diagnostic in `diags` (several per run where recovery allows).
// Never throws on bad input, never crashes or hangs, whatever the bytes.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "lumen/common/diagnostics.h"
#include "lumen/dsl/ast.h"

namespace lumen::dsl {

// Lexes, parses and checks `source` (named `filename` in diagnostics). Returns
// the module, or nullptr when errors were reported to `diags` (warnings alone
// do not fail). The source is registered with `diags` for caret printing.
std::unique_ptr<ast::Module> parse_and_check(std::string_view filename, std::string_view source,
                                             DiagnosticEngine& diags);

// The same for a file on disk; an unreadable file is a diagnostic.
std::unique_ptr<ast::Module> parse_and_check_file(const std::string& path, DiagnosticEngine& diags);

// The architecture a program describes: the NAME of its `model NAME` line, or
// "" when it has none. Only parses (the rest of the program may be wrong) and
// reports nothing: finding the program for a GGUF file asks every program.
std::string model_name(std::string_view filename, std::string_view source);

}  // namespace lumen::dsl
