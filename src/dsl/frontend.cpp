// The front end's entry point: lex, parse, then (only when the syntax is
// sound, to avoid cascades from half-parsed declarations) semantic analysis.
#include "lumen/dsl/frontend.h"

#include <fstream>
#include <sstream>

#include "lumen/dsl/lexer.h"
#include "lumen/dsl/parser.h"
#include "lumen/dsl/sema.h"

namespace lumen::dsl {

std::unique_ptr<ast::Module> parse_and_check(std::string_view filename, std::string_view source,
                                             DiagnosticEngine& diags) {
  diags.add_source(std::string(filename), std::string(source));
  int errors_before = diags.error_count();
  std::vector<Token> tokens = lex(filename, source, diags);
  std::unique_ptr<ast::Module> module = parse(filename, tokens, diags);
  if (diags.error_count() != errors_before) return nullptr;
  if (!check(*module, diags)) return nullptr;
  return module;
}

std::unique_ptr<ast::Module> parse_and_check_file(const std::string& path, DiagnosticEngine& diags) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    diags.error({path, {}, {}}, "cannot open file");
    return nullptr;
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) {
    diags.error({path, {}, {}}, "cannot read file");
    return nullptr;
  }
  return parse_and_check(path, text.str(), diags);
}

std::string model_name(std::string_view filename, std::string_view source) {
  DiagnosticEngine ignored;
  std::vector<Token> tokens = lex(filename, source, ignored);
  return parse(filename, tokens, ignored)->arch;
}

}  // namespace lumen::dsl
