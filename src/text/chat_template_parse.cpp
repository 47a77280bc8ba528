// Lexer and parser of the Jinja subset chat templates use. The lexer follows
// jinja2's with trim_blocks and lstrip_blocks on and keep_trailing_newline off
// (the settings of Hugging Face's apply_chat_template); the parser follows
// jinja2's grammar and operator precedence.
#include <cstring>
#include <string>
#include <vector>

#include "chat_template_ast.h"
#include "lumen/text/tokenizer.h"  // unicode::append_utf8

namespace lumen::chat {

namespace {

constexpr int kMaxNesting = 256;  // expression and statement nesting

enum class Tok { Data, VarBegin, VarEnd, BlockBegin, BlockEnd, Name, String, Int, Float, Op, Eof };

struct Token {
  Tok type;
  std::string value;
  Pos pos;
  int64_t int_value = 0;
  double float_value = 0;
};

bool is_py_space(unsigned char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

// Length of the Unicode whitespace code point at s[i] (Python's str.isspace),
// 0 when there is none.
size_t unicode_space_len(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  if (is_py_space(c) || (c >= 0x1c && c <= 0x1f)) return 1;
  auto at = [&](size_t k) { return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0; };
  if (c == 0xC2 && (at(1) == 0x85 || at(1) == 0xA0)) return 2;
  if (c == 0xE1 && at(1) == 0x9A && at(2) == 0x80) return 3;
  if (c == 0xE2 && at(1) == 0x80 && ((at(2) >= 0x80 && at(2) <= 0x8A) || at(2) == 0xA8 || at(2) == 0xA9 || at(2) == 0xAF))
    return 3;
  if (c == 0xE2 && at(1) == 0x81 && at(2) == 0x9F) return 3;
  if (c == 0xE3 && at(1) == 0x80 && at(2) == 0x80) return 3;
  return 0;
}

// Python's str.rstrip() on UTF-8.
std::string rstrip_unicode(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    // Find the start of the last code point.
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    if (unicode_space_len(s, start) == end - start) {
      end = start;
    } else {
      break;
    }
  }
  return std::string(s.substr(0, end));
}

class Lexer {
 public:
  explicit Lexer(std::string_view raw) {
    // Newlines normalized to \n, one trailing newline dropped (jinja2).
    src_.reserve(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) {
      if (raw[i] == '\r') {
        src_ += '\n';
        if (i + 1 < raw.size() && raw[i + 1] == '\n') ++i;
      } else {
        src_ += raw[i];
      }
    }
    if (!src_.empty() && src_.back() == '\n') src_.pop_back();
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<Token> run() {
    bool line_starting = true;
    while (pos_ < src_.size()) {
      size_t start = find_tag(pos_);
      std::string text = src_.substr(pos_, start - pos_);
      if (start == src_.size()) {
        emit_data(std::move(text), pos_);
        break;
      }
      const char kind = src_[start + 1];  // '{', '%', '#'
      const char modifier = start + 2 < src_.size() ? src_[start + 2] : '\0';
      if (modifier == '-') {
        text = rstrip_unicode(text);
      } else if (modifier != '+' && kind != '{') {
        // lstrip_blocks: whitespace between the line start and the tag goes.
        size_t l_pos = text.rfind('\n');
        l_pos = l_pos == std::string::npos ? 0 : l_pos + 1;
        if (l_pos > 0 || line_starting) {
          bool only_space = l_pos < text.size();
          for (size_t i = l_pos; i < text.size() && only_space;) {
            size_t n = unicode_space_len(text, i);
            if (n == 0) only_space = false;
            i += n ? n : 1;
          }
          if (only_space) text.resize(l_pos);
        }
      }
      emit_data(std::move(text), pos_);
      size_t p = start + 2 + ((modifier == '-' || modifier == '+') ? 1 : 0);
      if (kind == '#') {
        p = lex_comment_end(start, p);
      } else if (kind == '%' && is_raw(p)) {
        p = lex_raw(start, p);
      } else {
        tokens_.push_back({kind == '{' ? Tok::VarBegin : Tok::BlockBegin, "", pos_of(start)});
        p = lex_tag(p, kind == '{');
      }
      line_starting = p > 0 && src_[p - 1] == '\n';
      pos_ = p;
    }
    tokens_.push_back({Tok::Eof, "", pos_of(src_.size())});
    return std::move(tokens_);
  }

  Pos pos_of(size_t offset) const {
    size_t lo = 0, hi = line_starts_.size();
    while (hi - lo > 1) {
      size_t mid = (lo + hi) / 2;
      if (line_starts_[mid] <= offset) lo = mid; else hi = mid;
    }
    return {static_cast<int>(lo + 1), static_cast<int>(offset - line_starts_[lo] + 1)};
  }

 private:
  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return src_.size();
  }

  void emit_data(std::string text, size_t at) {
    if (!text.empty()) tokens_.push_back({Tok::Data, std::move(text), pos_of(at)});
  }

  // After an end marker at p (already past it): trim_blocks drops one
  // newline; a '-' before the marker drops all whitespace.
  size_t after_end(size_t p, bool minus, bool plus, bool trim_newline) const {
    if (minus) {
      while (p < src_.size()) {
        size_t n = unicode_space_len(src_, p);
        if (n == 0) break;
        p += n;
      }
    } else if (!plus && trim_newline && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    return p;
  }

  size_t lex_comment_end(size_t start, size_t p) {
    size_t end = src_.find("#}", p);
    if (end == std::string::npos) fail_at(pos_of(start), "unterminated comment: missing '#}'");
    bool minus = end > p && src_[end - 1] == '-';
    bool plus = end > p && src_[end - 1] == '+';
    return after_end(end + 2, minus, plus, true);
  }

  bool is_raw(size_t p) const {
    size_t q = p;
    while (q < src_.size() && is_py_space(static_cast<unsigned char>(src_[q]))) ++q;
    if (src_.compare(q, 3, "raw") != 0) return false;
    q += 3;
    while (q < src_.size() && is_py_space(static_cast<unsigned char>(src_[q]))) ++q;
    return src_.compare(q, 2, "%}") == 0 || src_.compare(q, 3, "-%}") == 0;
  }

  // {% raw %}...{% endraw %}: the text between is data as is.
  size_t lex_raw(size_t start, size_t p) {
    size_t close = src_.find("%}", p);
    bool minus = src_[close - 1] == '-';
    p = after_end(close + 2, minus, false, true);
    for (size_t q = p; (q = src_.find("{%", q)) != std::string::npos; q += 2) {
      size_t r = q + 2;
      bool lminus = r < src_.size() && src_[r] == '-';
      if (r < src_.size() && (src_[r] == '-' || src_[r] == '+')) ++r;
      while (r < src_.size() && is_py_space(static_cast<unsigned char>(src_[r]))) ++r;
      if (src_.compare(r, 6, "endraw") != 0) continue;
      r += 6;
      while (r < src_.size() && is_py_space(static_cast<unsigned char>(src_[r]))) ++r;
      bool eminus = src_.compare(r, 3, "-%}") == 0;
      if (!eminus && src_.compare(r, 2, "%}") != 0) continue;
      std::string text = src_.substr(p, q - p);
      if (lminus) text = rstrip_unicode(text);
      emit_data(std::move(text), p);
      return after_end(r + (eminus ? 3 : 2), eminus, false, true);
    }
    fail_at(pos_of(start), "missing '{% endraw %}'");
  }

  // Expression tokens up to the tag's end marker; returns the offset after it.
  size_t lex_tag(size_t p, bool variable) {
    const char* end_marker = variable ? "}}" : "%}";
    std::vector<char> balance;
    while (true) {
      if (p >= src_.size()) fail_at(pos_of(p), std::string("unexpected end of template, expected '") + end_marker + "'");
      const char c = src_[p];
      if (balance.empty()) {
        if (src_.compare(p, 2, end_marker) == 0) {
          tokens_.push_back({variable ? Tok::VarEnd : Tok::BlockEnd, "", pos_of(p)});
          return after_end(p + 2, false, false, !variable);
        }
        if ((c == '-' || c == '+') && src_.compare(p + 1, 2, end_marker) == 0 && !(c == '+' && variable)) {
          tokens_.push_back({variable ? Tok::VarEnd : Tok::BlockEnd, "", pos_of(p)});
          return after_end(p + 3, c == '-', c == '+', !variable);
        }
      }
      if (is_py_space(static_cast<unsigned char>(c))) {
        ++p;
        continue;
      }
      Pos at = pos_of(p);
      if (std::isdigit(static_cast<unsigned char>(c))) {
        p = lex_number(p, at);
      } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
        size_t q = p;
        while (q < src_.size() && (std::isalnum(static_cast<unsigned char>(src_[q])) || src_[q] == '_')) ++q;
        tokens_.push_back({Tok::Name, src_.substr(p, q - p), at});
        p = q;
      } else if (c == '"' || c == '\'') {
        p = lex_string(p, at);
      } else {
        static const char* const kOps[] = {"//", "**", "==", "!=", ">=", "<=", "+", "-", "/", "*", "%", "~", "[", "]",
                                           "(", ")", "{", "}", ">", "<", "=", ".", ":", "|", ",", ";"};
        const char* op = nullptr;
        for (const char* o : kOps)
          if (src_.compare(p, std::strlen(o), o) == 0) {
            op = o;
            break;
          }
        if (!op) fail_at(at, std::string("unexpected character '") + c + "'");
        std::string o(op);
        if (o == "(" || o == "[" || o == "{") balance.push_back(o[0]);
        if (o == ")" || o == "]" || o == "}") {
          const char open = o == ")" ? '(' : o == "]" ? '[' : '{';
          if (balance.empty()) fail_at(at, "unexpected '" + o + "'");
          if (balance.back() != open) fail_at(at, "unexpected '" + o + "', expected the closing of '" + balance.back() + "'");
          balance.pop_back();
        }
        tokens_.push_back({Tok::Op, o, at});
        p += o.size();
      }
    }
  }

  size_t lex_number(size_t p, Pos at) {
    size_t q = p;
    auto digits = [&](size_t& r) {
      size_t begin = r;
      while (r < src_.size() && (std::isdigit(static_cast<unsigned char>(src_[r])) ||
                                 (src_[r] == '_' && r > begin && r + 1 < src_.size() &&
                                  std::isdigit(static_cast<unsigned char>(src_[r + 1])))))
        ++r;
      return r > begin;
    };
    digits(q);
    bool is_float = false;
    if (q + 1 < src_.size() && src_[q] == '.' && std::isdigit(static_cast<unsigned char>(src_[q + 1]))) {
      ++q;
      digits(q);
      is_float = true;
    }
    if (q < src_.size() && (src_[q] == 'e' || src_[q] == 'E')) {
      size_t r = q + 1;
      if (r < src_.size() && (src_[r] == '+' || src_[r] == '-')) ++r;
      if (digits(r)) {
        q = r;
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < q; ++i)
      if (src_[i] != '_') text += src_[i];
    Token t{is_float ? Tok::Float : Tok::Int, text, at};
    if (is_float) {
      t.float_value = std::strtod(text.c_str(), nullptr);
    } else {
      errno = 0;
      t.int_value = std::strtoll(text.c_str(), nullptr, 10);
      if (errno == ERANGE) fail_at(at, "integer literal too large: " + text);
    }
    tokens_.push_back(std::move(t));
    return q;
  }

  // A string literal with Python's escapes (jinja2 decodes them with
  // "unicode-escape"; unknown escapes keep their backslash).
  size_t lex_string(size_t p, Pos at) {
    const char quote = src_[p];
    std::string out;
    size_t q = p + 1;
    while (true) {
      if (q >= src_.size()) fail_at(at, "unterminated string literal");
      char c = src_[q];
      if (c == quote) break;
      if (c != '\\') {
        out += c;
        ++q;
        continue;
      }
      if (q + 1 >= src_.size()) fail_at(at, "unterminated string literal");
      char e = src_[q + 1];
      q += 2;
      auto hex = [&](int n) -> uint32_t {
        uint32_t v = 0;
        for (int i = 0; i < n; ++i) {
          if (q >= src_.size() || !std::isxdigit(static_cast<unsigned char>(src_[q])))
            fail_at(at, "truncated \\x, \\u or \\U escape in a string literal");
          char h = src_[q++];
          v = v * 16 + static_cast<uint32_t>(std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
        }
        return v;
      };
      switch (e) {
        case 'n': out += '\n'; break;
        case 't': out += '\t'; break;
        case 'r': out += '\r'; break;
        case '\\': out += '\\'; break;
        case '\'': out += '\''; break;
        case '"': out += '"'; break;
        case 'a': out += '\a'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'v': out += '\v'; break;
        case '\n': break;
        case 'x': unicode::append_utf8(out, hex(2)); break;
        case 'u': {
          uint32_t cp = hex(4);
          if (cp >= 0xD800 && cp < 0xE000) fail_at(at, "surrogate escape in a string literal");
          unicode::append_utf8(out, cp);
          break;
        }
        case 'U': {
          uint32_t cp = hex(8);
          if (cp > 0x10FFFF || (cp >= 0xD800 && cp < 0xE000)) fail_at(at, "invalid \\U escape in a string literal");
          unicode::append_utf8(out, cp);
          break;
        }
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int i = 0; i < 2 && q < src_.size() && src_[q] >= '0' && src_[q] <= '7'; ++i)
              v = v * 8 + static_cast<uint32_t>(src_[q++] - '0');
            unicode::append_utf8(out, v);
          } else {
            out += '\\';
            out += e;
          }
      }
    }
    tokens_.push_back({Tok::String, std::move(out), at});
    return q + 1;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  std::vector<Token> tokens_;
  size_t pos_ = 0;
};

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Body parse_all() {
    Body body = parse_body({});
    if (cur().type != Tok::Eof) fail_at(cur().pos, "unexpected '" + cur().value + "'");
    return body;
  }

 private:
  const Token& cur() const { return t_[i_]; }
  const Token& peek(size_t k = 1) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  bool is_op(const char* op) const { return cur().type == Tok::Op && cur().value == op; }
  bool is_name(const char* n) const { return cur().type == Tok::Name && cur().value == n; }
  Token next() { return t_[i_ < t_.size() - 1 ? i_++ : i_]; }

  static std::string describe(const Token& t) {
    switch (t.type) {
      case Tok::Eof: return "end of template";
      case Tok::BlockEnd: return "end of statement block";
      case Tok::VarEnd: return "end of print statement";
      case Tok::Data: return "template data";
      default: return "'" + t.value + "'";
    }
  }

  void expect_op(const char* op) {
    if (!is_op(op)) fail_at(cur().pos, std::string("expected '") + op + "', got " + describe(cur()));
    next();
  }
  std::string expect_name() {
    if (cur().type != Tok::Name) fail_at(cur().pos, "expected a name, got " + describe(cur()));
    return next().value;
  }
  void expect_block_end() {
    if (cur().type != Tok::BlockEnd) fail_at(cur().pos, "expected end of statement block, got " + describe(cur()));
    next();
  }

  struct DepthGuard {
    explicit DepthGuard(Parser& p) : p_(p) {
      if (++p_.depth_ > kMaxNesting) fail_at(p_.cur().pos, "template nested too deeply (limit 256)");
    }
    ~DepthGuard() { --p_.depth_; }
    Parser& p_;
  };

  // Statements until one of `ends` (a block whose first name is in ends).
  Body parse_body(const std::vector<std::string>& ends) {
    DepthGuard guard(*this);
    Body body;
    while (true) {
      const Token& t = cur();
      if (t.type == Tok::Eof) {
        if (!ends.empty()) {
          std::string want;
          for (const auto& e : ends) want += (want.empty() ? "'" : " or '") + e + "'";
          fail_at(t.pos, "unexpected end of template, expected " + want);
        }
        return body;
      }
      if (t.type == Tok::Data) {
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::Text;
        n->pos = t.pos;
        n->text = t.value;
        body.push_back(std::move(n));
        next();
        continue;
      }
      if (t.type == Tok::VarBegin) {
        next();
        auto n = std::make_unique<Node>();
        n->kind = NodeKind::Output;
        n->pos = t.pos;
        n->expr = parse_tuple(false);
        if (cur().type != Tok::VarEnd) fail_at(cur().pos, "expected end of print statement, got " + describe(cur()));
        next();
        body.push_back(std::move(n));
        continue;
      }
      if (t.type == Tok::BlockBegin) {
        const Token& kw = peek();
        if (kw.type == Tok::Name) {
          for (const auto& e : ends)
            if (kw.value == e) return body;
        }
        next();
        body.push_back(parse_statement(t.pos));
        continue;
      }
      fail_at(t.pos, "unexpected " + describe(t));
    }
  }

  // At BlockBegin whose keyword is `name`: consumes "{% name" and returns.
  void enter_block(const char* name) {
    next();  // BlockBegin
    if (!is_name(name)) fail_at(cur().pos, std::string("expected '") + name + "'");
    next();
  }

  NodePtr parse_statement(Pos pos) {
    if (cur().type != Tok::Name) fail_at(cur().pos, "expected a statement name, got " + describe(cur()));
    const Token kw = next();
    const std::string& k = kw.value;
    auto n = std::make_unique<Node>();
    n->pos = kw.pos;
    if (k == "if") {
      n->kind = NodeKind::If;
      ExprPtr cond = parse_tuple(false);
      expect_block_end();
      Body b = parse_body({"elif", "else", "endif"});
      n->branches.emplace_back(std::move(cond), std::move(b));
      while (true) {
        next();  // BlockBegin
        const std::string which = next().value;
        if (which == "elif") {
          ExprPtr c = parse_tuple(false);
          expect_block_end();
          Body eb = parse_body({"elif", "else", "endif"});
          n->branches.emplace_back(std::move(c), std::move(eb));
        } else if (which == "else") {
          expect_block_end();
          n->else_body = parse_body({"endif"});
          enter_block("endif");
          expect_block_end();
          break;
        } else {
          expect_block_end();
          break;
        }
      }
    } else if (k == "for") {
      n->kind = NodeKind::For;
      n->targets.push_back(parse_assign_target(true));
      if (!is_name("in")) fail_at(cur().pos, "expected 'in' in a for loop, got " + describe(cur()));
      next();
      n->expr = parse_tuple(true, /*no_condexpr=*/true);
      if (is_name("if")) {
        next();
        n->filter = parse_expression();
      }
      if (is_name("recursive")) fail_at(cur().pos, "recursive for loops are not supported");
      expect_block_end();
      n->body = parse_body({"endfor", "else"});
      next();
      if (next().value == "else") {
        expect_block_end();
        n->else_body = parse_body({"endfor"});
        enter_block("endfor");
      }
      expect_block_end();
    } else if (k == "set") {
      n->kind = NodeKind::Set;
      n->targets.push_back(parse_assign_target(true, /*allow_attr=*/true));
      if (is_op("=")) {
        next();
        n->expr = parse_tuple(false);
        expect_block_end();
      } else {
        if (is_op("|")) n->filter = parse_filter_chain(nullptr);
        expect_block_end();
        n->body = parse_body({"endset"});
        enter_block("endset");
        expect_block_end();
      }
    } else if (k == "macro") {
      n->kind = NodeKind::Macro;
      n->name = expect_name();
      parse_params(n->params);
      expect_block_end();
      n->body = parse_body({"endmacro"});
      enter_block("endmacro");
      if (cur().type == Tok::Name) next();
      expect_block_end();
    } else if (k == "call") {
      n->kind = NodeKind::CallBlock;
      if (is_op("(")) parse_params(n->params);
      n->expr = parse_expression();
      if (n->expr->kind != ExprKind::Call) fail_at(n->expr->pos, "expected a call in a call block");
      expect_block_end();
      n->body = parse_body({"endcall"});
      enter_block("endcall");
      expect_block_end();
    } else if (k == "filter") {
      n->kind = NodeKind::FilterBlock;
      n->filter = parse_filter_chain(nullptr, /*first_has_pipe=*/false);
      expect_block_end();
      n->body = parse_body({"endfilter"});
      enter_block("endfilter");
      expect_block_end();
    } else if (k == "with") {
      n->kind = NodeKind::With;
      while (cur().type != Tok::BlockEnd) {
        if (!n->assignments.empty()) expect_op(",");
        std::string var = expect_name();
        expect_op("=");
        n->assignments.emplace_back(var, parse_expression());
      }
      expect_block_end();
      n->body = parse_body({"endwith"});
      enter_block("endwith");
      expect_block_end();
    } else if (k == "generation") {
      // HF's AssistantTracker tag: renders its body unchanged.
      n->kind = NodeKind::With;
      expect_block_end();
      n->body = parse_body({"endgeneration"});
      enter_block("endgeneration");
      expect_block_end();
    } else if (k == "break" || k == "continue") {
      if (loop_depth_ == 0) fail_at(kw.pos, "'" + k + "' outside of a loop");
      n->kind = k == "break" ? NodeKind::Break : NodeKind::Continue;
      expect_block_end();
    } else {
      fail_at(kw.pos, "unknown statement '" + k + "'");
    }
    (void)pos;
    return n;
  }

  void parse_params(std::vector<Param>& params) {
    expect_op("(");
    while (!is_op(")")) {
      if (!params.empty()) expect_op(",");
      if (is_op(")")) break;
      Param p;
      p.name = expect_name();
      if (is_op("=")) {
        next();
        p.default_value = parse_expression();
      } else if (!params.empty() && params.back().default_value) {
        fail_at(cur().pos, "non-default argument follows default argument");
      }
      params.push_back(std::move(p));
    }
    next();
  }

  ExprPtr make(ExprKind kind, Pos pos) {
    auto e = std::make_unique<Expr>();
    e->kind = kind;
    e->pos = pos;
    return e;
  }

  // Names (or a.b for set) and tuples of names.
  ExprPtr parse_assign_target(bool allow_tuple, bool allow_attr = false) {
    Pos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool paren = false;
    if (is_op("(")) {
      next();
      paren = true;
    }
    while (true) {
      Pos p = cur().pos;
      std::string n = expect_name();
      ExprPtr e = make(ExprKind::Name, p);
      e->name = n;
      if (allow_attr && is_op(".")) {
        next();
        ExprPtr a = make(ExprKind::GetAttr, p);
        a->name = expect_name();
        a->children.push_back(std::move(e));
        e = std::move(a);
      }
      items.push_back(std::move(e));
      if (!allow_tuple || !is_op(",")) break;
      next();
      if (cur().type != Tok::Name) break;
    }
    if (paren) expect_op(")");
    if (items.size() == 1 && !paren) return std::move(items[0]);
    ExprPtr t = make(ExprKind::Tuple, pos);
    t->children = std::move(items);
    return t;
  }

  // expr (, expr)* : a tuple when there is a comma.
  ExprPtr parse_tuple(bool allow_tuple_without_parens, bool no_condexpr = false) {
    (void)allow_tuple_without_parens;
    Pos pos = cur().pos;
    std::vector<ExprPtr> items;
    bool comma = false;
    while (true) {
      if (!items.empty()) {
        if (!is_op(",")) break;
        next();
        comma = true;
        if (cur().type == Tok::VarEnd || cur().type == Tok::BlockEnd || is_op(")") || is_name("if") ||
            is_name("in"))
          break;
      }
      items.push_back(no_condexpr ? parse_or() : parse_expression());
    }
    if (!comma) return std::move(items[0]);
    ExprPtr t = make(ExprKind::Tuple, pos);
    t->children = std::move(items);
    return t;
  }

  ExprPtr parse_expression() {
    DepthGuard guard(*this);
    ExprPtr e = parse_or();
    while (is_name("if")) {
      Pos p = cur().pos;
      next();
      ExprPtr cond = parse_or();
      ExprPtr otherwise;
      if (is_name("else")) {
        next();
        otherwise = parse_expression();
      }
      ExprPtr c = make(ExprKind::CondExpr, p);
      c->children.push_back(std::move(e));
      c->children.push_back(std::move(cond));
      c->children.push_back(std::move(otherwise));
      e = std::move(c);
    }
    return e;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      Pos p = next().pos;
      ExprPtr o = make(ExprKind::Or, p);
      o->children.push_back(std::move(left));
      o->children.push_back(parse_and());
      left = std::move(o);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      Pos p = next().pos;
      ExprPtr a = make(ExprKind::And, p);
      a->children.push_back(std::move(left));
      a->children.push_back(parse_not());
      left = std::move(a);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      DepthGuard guard(*this);
      Pos p = next().pos;
      ExprPtr n = make(ExprKind::Not, p);
      n->children.push_back(parse_not());
      return n;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    Pos pos = cur().pos;
    ExprPtr first = parse_math1();
    ExprPtr c;
    while (true) {
      std::string op;
      if (cur().type == Tok::Op &&
          (cur().value == "==" || cur().value == "!=" || cur().value == "<" || cur().value == "<=" ||
           cur().value == ">" || cur().value == ">=")) {
        op = next().value;
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && peek().type == Tok::Name && peek().value == "in") {
        next();
        next();
        op = "notin";
      } else {
        break;
      }
      if (!c) {
        c = make(ExprKind::Compare, pos);
        c->children.push_back(std::move(first));
      }
      c->ops.push_back(op);
      c->children.push_back(parse_math1());
    }
    return c ? std::move(c) : std::move(first);
  }

  ExprPtr binary(const std::string& op, Pos p, ExprPtr l, ExprPtr r) {
    ExprPtr b = make(ExprKind::Binary, p);
    b->name = op;
    b->children.push_back(std::move(l));
    b->children.push_back(std::move(r));
    return b;
  }

  ExprPtr parse_math1() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      Token op = next();
      left = binary(op.value, op.pos, std::move(left), parse_concat());
    }
    return left;
  }

  ExprPtr parse_concat() {
    Pos pos = cur().pos;
    ExprPtr first = parse_math2();
    if (!is_op("~")) return first;
    ExprPtr c = make(ExprKind::Concat, pos);
    c->children.push_back(std::move(first));
    while (is_op("~")) {
      next();
      c->children.push_back(parse_math2());
    }
    return c;
  }

  ExprPtr parse_math2() {
    ExprPtr left = parse_pow();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      Token op = next();
      left = binary(op.value, op.pos, std::move(left), parse_pow());
    }
    return left;
  }

  ExprPtr parse_pow() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      Token op = next();
      left = binary("**", op.pos, std::move(left), parse_unary(true));
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filter) {
    DepthGuard guard(*this);
    ExprPtr node;
    if (is_op("-") || is_op("+")) {
      Token op = next();
      node = make(ExprKind::Unary, op.pos);
      node->name = op.value;
      node->children.push_back(parse_unary(false));
    } else {
      node = parse_primary();
    }
    node = parse_postfix(std::move(node));
    if (with_filter) node = parse_filter_expr(std::move(node));
    return node;
  }

  ExprPtr literal(LiteralKind k, Pos p) {
    ExprPtr e = make(ExprKind::Literal, p);
    e->literal_kind = k;
    return e;
  }

  ExprPtr parse_primary() {
    const Token& t = cur();
    Pos p = t.pos;
    switch (t.type) {
      case Tok::Name: {
        const std::string& v = t.value;
        if (v == "true" || v == "True" || v == "false" || v == "False") {
          ExprPtr e = literal(LiteralKind::Bool, p);
          e->int_value = (v == "true" || v == "True");
          next();
          return e;
        }
        if (v == "none" || v == "None") {
          next();
          return literal(LiteralKind::None, p);
        }
        ExprPtr e = make(ExprKind::Name, p);
        e->name = v;
        next();
        return e;
      }
      case Tok::String: {
        ExprPtr e = literal(LiteralKind::String, p);
        while (cur().type == Tok::String) e->str_value += next().value;
        return e;
      }
      case Tok::Int: {
        ExprPtr e = literal(LiteralKind::Int, p);
        e->int_value = t.int_value;
        next();
        return e;
      }
      case Tok::Float: {
        ExprPtr e = literal(LiteralKind::Float, p);
        e->float_value = t.float_value;
        next();
        return e;
      }
      case Tok::Op:
        if (t.value == "(") {
          next();
          if (is_op(")")) {
            next();
            return make(ExprKind::Tuple, p);
          }
          ExprPtr first = parse_expression();
          if (is_op(")")) {
            next();
            return first;
          }
          ExprPtr tuple = make(ExprKind::Tuple, p);
          tuple->children.push_back(std::move(first));
          while (is_op(",")) {
            next();
            if (is_op(")")) break;
            tuple->children.push_back(parse_expression());
          }
          expect_op(")");
          return tuple;
        }
        if (t.value == "[") {
          next();
          ExprPtr list = make(ExprKind::List, p);
          while (!is_op("]")) {
            if (!list->children.empty()) expect_op(",");
            if (is_op("]")) break;
            list->children.push_back(parse_expression());
          }
          next();
          return list;
        }
        if (t.value == "{") {
          next();
          ExprPtr dict = make(ExprKind::Dict, p);
          while (!is_op("}")) {
            if (!dict->children.empty()) expect_op(",");
            if (is_op("}")) break;
            dict->children.push_back(parse_expression());
            expect_op(":");
            dict->children.push_back(parse_expression());
          }
          next();
          return dict;
        }
        break;
      default:
        break;
    }
    fail_at(p, "unexpected " + describe(t));
  }

  ExprPtr parse_postfix(ExprPtr node) {
    while (true) {
      if (is_op(".")) {
        Pos p = next().pos;
        if (cur().type == Tok::Int) {
          ExprPtr idx = literal(LiteralKind::Int, cur().pos);
          idx->int_value = next().int_value;
          ExprPtr g = make(ExprKind::GetItem, p);
          g->children.push_back(std::move(node));
          g->children.push_back(std::move(idx));
          node = std::move(g);
        } else {
          ExprPtr g = make(ExprKind::GetAttr, p);
          g->name = expect_name();
          g->children.push_back(std::move(node));
          node = std::move(g);
        }
      } else if (is_op("[")) {
        Pos p = next().pos;
        ExprPtr g = make(ExprKind::GetItem, p);
        g->children.push_back(std::move(node));
        g->children.push_back(parse_subscript());
        expect_op("]");
        node = std::move(g);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  ExprPtr parse_subscript() {
    Pos p = cur().pos;
    ExprPtr start, stop, step;
    if (!is_op(":")) {
      start = parse_expression();
      if (!is_op(":")) return start;
    }
    next();
    if (!is_op("]") && !is_op(":")) stop = parse_expression();
    if (is_op(":")) {
      next();
      if (!is_op("]")) step = parse_expression();
    }
    ExprPtr s = make(ExprKind::Slice, p);
    s->children.push_back(std::move(start));
    s->children.push_back(std::move(stop));
    s->children.push_back(std::move(step));
    return s;
  }

  void parse_args(std::vector<Arg>& args) {
    expect_op("(");
    while (!is_op(")")) {
      if (!args.empty()) expect_op(",");
      if (is_op(")")) break;
      if (is_op("*") || is_op("**")) fail_at(cur().pos, "*args and **kwargs in calls are not supported");
      Arg a;
      if (cur().type == Tok::Name && peek().type == Tok::Op && peek().value == "=") {
        a.keyword = next().value;
        next();
      } else if (!args.empty() && !args.back().keyword.empty()) {
        fail_at(cur().pos, "positional argument follows keyword argument");
      }
      a.value = parse_expression();
      args.push_back(std::move(a));
    }
    next();
  }

  ExprPtr parse_call(ExprPtr callee) {
    ExprPtr c = make(ExprKind::Call, cur().pos);
    c->children.push_back(std::move(callee));
    parse_args(c->args);
    return c;
  }

  std::string parse_dotted_name() {
    std::string n = expect_name();
    while (is_op(".")) {
      next();
      n += "." + expect_name();
    }
    return n;
  }

  // | name(args) | name ... applied to operand (null in filter blocks).
  ExprPtr parse_filter_chain(ExprPtr operand, bool first_has_pipe = true) {
    bool first = true;
    while (is_op("|") || (first && !first_has_pipe)) {
      if (!(first && !first_has_pipe)) next();
      first = false;
      ExprPtr f = make(ExprKind::Filter, cur().pos);
      f->name = parse_dotted_name();
      if (is_op("(")) parse_args(f->args);
      f->children.push_back(std::move(operand));
      operand = std::move(f);
    }
    return operand;
  }

  ExprPtr parse_filter_expr(ExprPtr node) {
    while (true) {
      if (is_op("|")) {
        node = parse_filter_chain(std::move(node));
      } else if (is_name("is")) {
        Pos p = next().pos;
        ExprPtr t = make(ExprKind::Test, p);
        if (is_name("not")) {
          next();
          t->negated = true;
        }
        t->name = parse_dotted_name();
        if (is_op("(")) {
          parse_args(t->args);
        } else if ((cur().type == Tok::Name || cur().type == Tok::String || cur().type == Tok::Int ||
                    cur().type == Tok::Float || is_op("(") || is_op("[") || is_op("{")) &&
                   !is_name("else") && !is_name("or") && !is_name("and")) {
          if (is_name("is")) fail_at(cur().pos, "you cannot chain multiple tests with is");
          Arg a;
          a.value = parse_postfix(parse_primary());
          t->args.push_back(std::move(a));
        }
        t->children.push_back(std::move(node));
        node = std::move(t);
      } else if (is_op("(")) {
        node = parse_call(std::move(node));
      } else {
        return node;
      }
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
  int loop_depth_ = 1000;  // break/continue placement is checked at run time
};

}  // namespace

std::unique_ptr<ChatTemplate::Program> parse_template(std::string_view source) {
  Lexer lexer(source);
  Parser parser(lexer.run());
  auto program = std::make_unique<ChatTemplate::Program>();
  program->body = parser.parse_all();
  return program;
}

}  // namespace lumen::chat
