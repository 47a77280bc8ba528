// The DSL lexer: source text -> tokens with source ranges. `#` starts a
// comment to the end of the line. Newlines are insignificant (declarations
// and statements begin with a keyword or a name, so the parser needs no
// terminators); the parser uses Token::at_line_start to resynchronize.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/common/diagnostics.h"

namespace lumen::dsl {

enum class TokenKind {
  End,         // end of input
  Error,       // a bad character or literal (already diagnosed)
  Identifier,  // names and keywords: keywords are identifiers the parser knows
  Int,
  Float,
  String,
  LParen, RParen, LBracket, RBracket, LBrace, RBrace,
  Comma, Colon, Assign, Arrow,  // , : = ->
  Plus, Minus, Star, Slash, Percent,
  EqEq, NotEq, Less, LessEq, Greater, GreaterEq,
  AndAnd, OrOr, Not,
};
const char* to_string(TokenKind k);  // for messages: "identifier", "'('", ...

struct Token {
  TokenKind kind = TokenKind::End;
  std::string text;          // the spelling; for String, the decoded value
  int64_t int_value = 0;     // Int
  double float_value = 0.0;  // Float
  SourceRange range;
  bool at_line_start = false;  // first token on its line
};

// Lexes all of `source`; the result always ends with an End token. Bad input
// is reported to `diags` and produces Error tokens, never an exception.
std::vector<Token> lex(std::string_view filename, std::string_view source, DiagnosticEngine& diags);

}  // namespace lumen::dsl
