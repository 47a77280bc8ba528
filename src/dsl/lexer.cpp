// The DSL lexer: one pass over the bytes, producing tokens with ranges.
// Errors (stray characters, malformed numbers, unterminated strings, bad
// escapes) become diagnostics and Error tokens so that parsing can go on.
#include "lumen/dsl/lexer.h"

#include <cerrno>
#include <cstdlib>

namespace lumen::dsl {

const char* to_string(TokenKind k) {
  switch (k) {
    case TokenKind::End: return "end of file";
    case TokenKind::Error: return "invalid token";
    case TokenKind::Identifier: return "identifier";
    case TokenKind::Int: return "integer";
    case TokenKind::Float: return "float";
    case TokenKind::String: return "string";
    case TokenKind::LParen: return "'('";
    case TokenKind::RParen: return "')'";
    case TokenKind::LBracket: return "'['";
    case TokenKind::RBracket: return "']'";
    case TokenKind::LBrace: return "'{'";
    case TokenKind::RBrace: return "'}'";
    case TokenKind::Comma: return "','";
    case TokenKind::Colon: return "':'";
    case TokenKind::Assign: return "'='";
    case TokenKind::Arrow: return "'->'";
    case TokenKind::Plus: return "'+'";
    case TokenKind::Minus: return "'-'";
    case TokenKind::Star: return "'*'";
    case TokenKind::Slash: return "'/'";
    case TokenKind::Percent: return "'%'";
    case TokenKind::EqEq: return "'=='";
    case TokenKind::NotEq: return "'!='";
    case TokenKind::Less: return "'<'";
    case TokenKind::LessEq: return "'<='";
    case TokenKind::Greater: return "'>'";
    case TokenKind::GreaterEq: return "'>='";
    case TokenKind::AndAnd: return "'&&'";
    case TokenKind::OrOr: return "'||'";
    case TokenKind::Not: return "'!'";
  }
  return "token";
}

namespace {

bool is_ident_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_ident_char(char c) { return is_ident_start(c) || is_digit(c); }

class Lexer {
 public:
  Lexer(std::string_view filename, std::string_view source, DiagnosticEngine& diags)
      : file_(filename), src_(source), diags_(diags) {}

  std::vector<Token> run() {
    std::vector<Token> tokens;
    bool line_start = true;
    for (;;) {
      line_start = skip_space_and_comments() || line_start;
      Token t = next();
      t.at_line_start = line_start;
      line_start = false;
      tokens.push_back(std::move(t));
      if (tokens.back().kind == TokenKind::End) return tokens;
    }
  }

 private:
  SourceLoc loc() const { return {line_, col_}; }
  char peek(size_t ahead = 0) const { return pos_ + ahead < src_.size() ? src_[pos_ + ahead] : '\0'; }
  bool at_end() const { return pos_ >= src_.size(); }
  void advance() {
    if (src_[pos_] == '\n') {
      ++line_;
      col_ = 1;
    } else {
      ++col_;
    }
    ++pos_;
  }
  SourceRange range_from(SourceLoc begin) const { return {file_, begin, loc()}; }

  // Returns true when a newline was crossed.
  bool skip_space_and_comments() {
    bool newline = false;
    while (!at_end()) {
      char c = peek();
      if (c == '\n') {
        newline = true;
        advance();
      } else if (c == ' ' || c == '\t' || c == '\r') {
        advance();
      } else if (c == '#') {
        while (!at_end() && peek() != '\n') advance();
      } else {
        break;
      }
    }
    return newline;
  }

  Token make(TokenKind kind, SourceLoc begin, size_t start) {
    Token t;
    t.kind = kind;
    t.text = std::string(src_.substr(start, pos_ - start));
    t.range = range_from(begin);
    return t;
  }

  Token next() {
    SourceLoc begin = loc();
    size_t start = pos_;
    if (at_end()) return make(TokenKind::End, begin, start);
    char c = peek();
    if (is_ident_start(c)) {
      while (is_ident_char(peek())) advance();
      return make(TokenKind::Identifier, begin, start);
    }
    if (is_digit(c) || (c == '.' && is_digit(peek(1)))) return number(begin, start);
    if (c == '"') return string(begin, start);

    auto two = [&](char second, TokenKind both, TokenKind one) {
      advance();
      if (peek() == second) {
        advance();
        return make(both, begin, start);
      }
      return make(one, begin, start);
    };
    switch (c) {
      case '(': advance(); return make(TokenKind::LParen, begin, start);
      case ')': advance(); return make(TokenKind::RParen, begin, start);
      case '[': advance(); return make(TokenKind::LBracket, begin, start);
      case ']': advance(); return make(TokenKind::RBracket, begin, start);
      case '{': advance(); return make(TokenKind::LBrace, begin, start);
      case '}': advance(); return make(TokenKind::RBrace, begin, start);
      case ',': advance(); return make(TokenKind::Comma, begin, start);
      case ':': advance(); return make(TokenKind::Colon, begin, start);
      case '+': advance(); return make(TokenKind::Plus, begin, start);
      case '*': advance(); return make(TokenKind::Star, begin, start);
      case '/': advance(); return make(TokenKind::Slash, begin, start);
      case '%': advance(); return make(TokenKind::Percent, begin, start);
      case '-': return two('>', TokenKind::Arrow, TokenKind::Minus);
      case '=': return two('=', TokenKind::EqEq, TokenKind::Assign);
      case '!': return two('=', TokenKind::NotEq, TokenKind::Not);
      case '<': return two('=', TokenKind::LessEq, TokenKind::Less);
      case '>': return two('=', TokenKind::GreaterEq, TokenKind::Greater);
      case '&':
        if (peek(1) == '&') {
          advance();
          advance();
          return make(TokenKind::AndAnd, begin, start);
        }
        break;
      case '|':
        if (peek(1) == '|') {
          advance();
          advance();
          return make(TokenKind::OrOr, begin, start);
        }
        break;
      default: break;
    }
    return bad_character(begin, start);
  }

  Token bad_character(SourceLoc begin, size_t start) {
    unsigned char c = static_cast<unsigned char>(peek());
    // Consume a whole UTF-8 sequence so that one character gives one error.
    advance();
    if (c >= 0x80) {
      while (!at_end() && (static_cast<unsigned char>(peek()) & 0xC0) == 0x80) advance();
    }
    Token t = make(TokenKind::Error, begin, start);
    std::string shown;
    if (c >= 0x20 && c < 0x7F) {
      shown = std::string("'") + static_cast<char>(c) + "'";
    } else {
      static const char* hex = "0123456789abcdef";
      shown = std::string("byte 0x") + hex[c >> 4] + hex[c & 15];
    }
    diags_.error(t.range, "unexpected character " + shown);
    return t;
  }

  // int   = digit+
  // float = digit* "." digit+ [exponent] | digit+ exponent | digit+ "." [exponent]
  Token number(SourceLoc begin, size_t start) {
    bool is_float = false;
    while (is_digit(peek())) advance();
    if (peek() == '.' && is_digit(peek(1))) {
      is_float = true;
      advance();
      while (is_digit(peek())) advance();
    } else if (peek() == '.' && !is_ident_start(peek(1))) {
      is_float = true;
      advance();
    }
    if ((peek() == 'e' || peek() == 'E') &&
        (is_digit(peek(1)) || ((peek(1) == '+' || peek(1) == '-') && is_digit(peek(2))))) {
      is_float = true;
      advance();
      if (peek() == '+' || peek() == '-') advance();
      while (is_digit(peek())) advance();
    }
    if (is_ident_char(peek())) {
      while (is_ident_char(peek())) advance();
      Token t = make(TokenKind::Error, begin, start);
      diags_.error(t.range, "invalid number '" + t.text + "'");
      return t;
    }
    Token t = make(is_float ? TokenKind::Float : TokenKind::Int, begin, start);
    errno = 0;
    if (is_float) {
      t.float_value = std::strtod(t.text.c_str(), nullptr);
      if (errno == ERANGE && (t.float_value > 1.0 || t.float_value < -1.0)) {
        diags_.error(t.range, "float literal '" + t.text + "' is out of range");
        t.kind = TokenKind::Error;
      }
    } else {
      t.int_value = std::strtoll(t.text.c_str(), nullptr, 10);
      if (errno == ERANGE) {
        diags_.error(t.range, "integer literal '" + t.text + "' is too large");
        t.kind = TokenKind::Error;
      }
    }
    return t;
  }

  // string = '"' (char | '\' ('n' | 't' | '\' | '"'))* '"'   (on one line)
  Token string(SourceLoc begin, size_t start) {
    advance();  // opening quote
    std::string value;
    bool ok = true;
    for (;;) {
      if (at_end() || peek() == '\n') {
        Token t = make(TokenKind::Error, begin, start);
        diags_.error({file_, begin, {begin.line, begin.col + 1}}, "unterminated string");
        return t;
      }
      char c = peek();
      if (c == '"') {
        advance();
        break;
      }
      if (c == '\\') {
        SourceLoc esc = loc();
        advance();
        char e = at_end() ? '\0' : peek();
        if (e == '\0' || e == '\n') continue;  // reported as unterminated
        switch (e) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case '\\': value += '\\'; break;
          case '"': value += '"'; break;
          default: {
            ok = false;
            std::string shown = e >= 0x20 && e < 0x7F ? std::string("\\") + e : std::string("\\ followed by a control byte");
            diags_.error({file_, esc, {esc.line, esc.col + 2}}, "invalid escape sequence '" + shown + "' in string");
            break;
          }
        }
        advance();
        continue;
      }
      value += c;
      advance();
    }
    Token t = make(ok ? TokenKind::String : TokenKind::Error, begin, start);
    t.text = std::move(value);
    return t;
  }

  std::string file_;
  std::string_view src_;
  DiagnosticEngine& diags_;
  size_t pos_ = 0;
  int line_ = 1;
  int col_ = 1;
};

}  // namespace

std::vector<Token> lex(std::string_view filename, std::string_view source, DiagnosticEngine& diags) {
  return Lexer(filename, source, diags).run();
}

}  // namespace lumen::dsl
