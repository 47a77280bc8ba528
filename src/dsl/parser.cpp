// The DSL parser: plain recursive descent over the token vector, one function
// per grammar rule (the rule is in the comment above it).
//
// Every parse function either returns a node or reports one error and returns
// nullptr / false. Recovery happens at declaration and statement level only:
// after an error the parser skips to the next token that starts a line and
// can start a declaration (or, inside a block, a statement / entry, or the
// closing brace). Errors on Error tokens are not reported again: the lexer
// already said what is wrong with them.
#include "lumen/dsl/parser.h"

#include <string_view>

namespace lumen::dsl {

using namespace ast;

namespace {

// Stop reporting (and parsing) after this many errors: the rest is noise.
constexpr int kMaxErrors = 50;
// Sema allows one loop; deeper nesting is only parsed to report it, and is
// bounded so that the recursion is.
constexpr int kMaxLoopDepth = 4;

bool is_decl_keyword(const Token& t) {
  if (t.kind != TokenKind::Identifier) return false;
  return t.text == "model" || t.text == "param" || t.text == "let" || t.text == "check" || t.text == "weight" ||
         t.text == "layer" || t.text == "forward";
}

// Words that start declarations or statements: never names in expressions,
// so that a truncated expression does not swallow the next line.
bool is_keyword(const Token& t) {
  return is_decl_keyword(t) || (t.kind == TokenKind::Identifier &&
                                (t.text == "for" || t.text == "in" || t.text == "return" || t.text == "else"));
}

std::string describe(const Token& t) {
  switch (t.kind) {
    case TokenKind::Identifier: return (is_keyword(t) ? "keyword '" : "'") + t.text + "'";
    case TokenKind::Int:
    case TokenKind::Float: return "number '" + t.text + "'";
    case TokenKind::String: return "string";
    default: return to_string(t.kind);
  }
}

// A type of the list that the DSL may write.
bool parse_dtype(const std::string& s, DType& out) {
  std::optional<DType> d = ops::parse_dtype(s);
  if (!d || !ops::row(*d).in_dsl) return false;
  out = *d;
  return true;
}

class Parser {
 public:
  Parser(std::string_view filename, const std::vector<Token>& tokens, DiagnosticEngine& diags)
      : file_(filename), toks_(tokens), diags_(diags) {}

  std::unique_ptr<Module> run() {
    auto m = std::make_unique<Module>();
    m->filename = file_;
    parse_module(*m);
    return m;
  }

 private:
  // ------------------------------------------------------------ helpers

  const Token& tok() const { return toks_[pos_]; }
  const Token& peek(size_t ahead) const {
    size_t i = pos_ + ahead;
    return i < toks_.size() ? toks_[i] : toks_.back();
  }
  bool at(TokenKind k) const { return tok().kind == k; }
  bool at_word(std::string_view w) const { return tok().kind == TokenKind::Identifier && tok().text == w; }
  bool too_many_errors() const { return errors_ >= kMaxErrors; }

  const Token& take() {
    const Token& t = toks_[pos_];
    prev_end_ = t.range.end;
    if (t.kind != TokenKind::End) ++pos_;
    return t;
  }

  SourceRange from(const SourceRange& begin) const { return {file_, begin.begin, prev_end_}; }

  void error(const SourceRange& r, std::string msg) {
    ++errors_;
    if (errors_ < kMaxErrors) {
      diags_.error(r, std::move(msg));
    } else if (errors_ == kMaxErrors) {
      diags_.error(r, "too many errors, stopping here");
    }
  }

  // "expected X, found Y", unless the current token is an Error token the
  // lexer reported. When the current token starts a new line (or is the
  // end), the construct was cut short: point just past the previous token.
  void error_expected(const std::string& what) {
    if (at(TokenKind::Error)) {
      ++errors_;
      return;
    }
    if (at(TokenKind::End) || tok().at_line_start) {
      error({file_, prev_end_, prev_end_},
            "expected " + what + ", found " + (at(TokenKind::End) ? "end of file" : "end of line"));
      return;
    }
    error(tok().range, "expected " + what + ", found " + describe(tok()));
  }

  // "expected X, found Y" at the current token: for rules that begin there.
  void error_expected_here(const std::string& what) {
    if (at(TokenKind::Error)) {
      ++errors_;
      return;
    }
    error(tok().range, "expected " + what + ", found " + describe(tok()));
  }

  // A block that reaches a declaration keyword or the end of the file.
  void error_unclosed(const SourceRange& open_brace) {
    error({file_, prev_end_, prev_end_}, "expected '}'");
    if (errors_ < kMaxErrors) diags_.note(open_brace, "to match this '{'");
  }

  bool expect(TokenKind k, const std::string& what) {
    if (at(k)) {
      take();
      return true;
    }
    error_expected(what);
    return false;
  }

  bool expect_word(std::string_view w) {
    if (at_word(w)) {
      take();
      return true;
    }
    std::string what = "'";  // built stepwise: GCC 12 warns falsely on "'" + std::string(w)
    what += w;
    what += "'";
    error_expected(what);
    return false;
  }

  bool expect_identifier(const std::string& what, std::string& name, SourceRange& range) {
    if (!at(TokenKind::Identifier)) {
      error_expected(what);
      return false;
    }
    name = tok().text;
    range = tok().range;
    take();
    return true;
  }

  // Skips to the next line-starting declaration keyword (or the end). The
  // token at `start` (where the failed rule began) is always skipped, so
  // that recovery makes progress.
  void sync_to_decl(size_t start) {
    if (pos_ == start) take();
    while (!at(TokenKind::End) && !(tok().at_line_start && is_decl_keyword(tok()))) take();
  }

  // Inside a block: skips to the next line-starting token or a closing brace.
  void sync_in_block(size_t start) {
    if (pos_ == start) take();
    while (!at(TokenKind::End) && !tok().at_line_start && !at(TokenKind::RBrace)) take();
  }

  // ------------------------------------------------------ declarations

  // module = "model" IDENT decl* EOF
  void parse_module(Module& m) {
    if (at_word("model")) {
      size_t start = pos_;
      take();
      if (!expect_identifier("the architecture name after 'model'", m.arch, m.arch_range)) sync_to_decl(start);
    } else {
      error_expected_here("'model NAME' at the start of the program");
      if (!(tok().at_line_start && is_decl_keyword(tok()))) sync_to_decl(pos_);
    }
    while (!at(TokenKind::End) && !too_many_errors()) {
      size_t start = pos_;
      if (!parse_decl(m)) sync_to_decl(start);
    }
  }

  // decl = param_decl | let_decl | check_decl | weight_decl | layer_block | forward_decl
  // weight_decl = "weight" weight_body
  bool parse_decl(Module& m) {
    if (at_word("param") || at_word("let")) {
      auto p = at_word("param") ? parse_param() : parse_let();
      if (!p) return false;
      m.params.push_back(std::move(p));
      return true;
    }
    if (at_word("check")) {
      auto c = parse_check();
      if (!c) return false;
      m.checks.push_back(std::move(c));
      return true;
    }
    if (at_word("weight")) {
      take();
      auto w = parse_weight_body(false);
      if (!w) return false;
      m.weights.push_back(std::move(w));
      return true;
    }
    if (at_word("layer")) {
      if (m.layer_weights) {
        error(tok().range, "a program has at most one 'layer weights' block");
        return false;
      }
      return parse_layer_block(m);
    }
    if (at_word("forward")) {
      if (m.forward) {
        error(tok().range, "a program has exactly one 'forward' function");
        return false;
      }
      return parse_forward(m);
    }
    if (at_word("model")) {
      error(tok().range, "'model' may appear only once, at the start of the program");
      return false;
    }
    error_expected_here("a declaration (param, let, check, weight, layer weights or forward)");
    return false;
  }

  // param_decl = "param" IDENT ":" ("int" | "float") "=" param_source
  // param_source = "key" "(" STRING ["," "default" "=" expr] ")" | "len" "(" STRING ")"
  std::unique_ptr<ParamDecl> parse_param() {
    SourceRange begin = take().range;  // param
    auto p = std::make_unique<ParamDecl>();
    if (!expect_identifier("a parameter name", p->name, p->name_range)) return nullptr;
    if (!expect(TokenKind::Colon, "':' and a type (int or float)")) return nullptr;
    if (at_word("int") || at_word("float")) {
      p->type = tok().text == "int" ? ScalarType::Int : ScalarType::Float;
      take();
    } else {
      error_expected("a parameter type (int or float)");
      return nullptr;
    }
    if (!expect(TokenKind::Assign, "'=' and a metadata binding")) return nullptr;
    if (!(at_word("key") || at_word("len")) || peek(1).kind != TokenKind::LParen) {
      error(tok().range, "a param is bound with key(\"...\") or len(\"...\"); use 'let' for a derived value");
      return nullptr;
    }
    p->source = at_word("key") ? ParamDecl::Source::Key : ParamDecl::Source::ArrayLength;
    take();
    take();  // (
    if (!at(TokenKind::String)) {
      error_expected("a metadata key string");
      return nullptr;
    }
    p->key = tok().text;
    p->key_range = tok().range;
    take();
    if (p->source == ParamDecl::Source::Key && at(TokenKind::Comma)) {
      take();
      if (!expect_word("default")) return nullptr;
      if (!expect(TokenKind::Assign, "'=' after 'default'")) return nullptr;
      p->default_value = parse_expr();
      if (!p->default_value) return nullptr;
    }
    if (!expect(TokenKind::RParen, "')'")) return nullptr;
    p->range = from(begin);
    return p;
  }

  // let_decl = "let" IDENT "=" expr
  std::unique_ptr<ParamDecl> parse_let() {
    SourceRange begin = take().range;  // let
    auto p = std::make_unique<ParamDecl>();
    p->source = ParamDecl::Source::Derived;
    if (!expect_identifier("a name after 'let'", p->name, p->name_range)) return nullptr;
    if (!expect(TokenKind::Assign, "'='")) return nullptr;
    p->value = parse_expr();
    if (!p->value) return nullptr;
    p->range = from(begin);
    return p;
  }

  // check_decl = "check" expr ":" STRING
  std::unique_ptr<CheckDecl> parse_check() {
    SourceRange begin = take().range;  // check
    auto c = std::make_unique<CheckDecl>();
    c->condition = parse_expr();
    if (!c->condition) return nullptr;
    if (!expect(TokenKind::Colon, "':' and a message string")) return nullptr;
    if (!at(TokenKind::String)) {
      error_expected("a message string");
      return nullptr;
    }
    c->message = take().text;
    c->range = from(begin);
    return c;
  }

  // weight_body = IDENT ":" tensor_type "=" STRING ["else" STRING | "optional"]
  std::unique_ptr<WeightDecl> parse_weight_body(bool per_layer) {
    auto w = std::make_unique<WeightDecl>();
    w->per_layer = per_layer;
    if (!expect_identifier("a weight name", w->name, w->name_range)) return nullptr;
    if (!expect(TokenKind::Colon, "':' and a tensor type")) return nullptr;
    if (!parse_tensor_type(w->type)) return nullptr;
    if (!expect(TokenKind::Assign, "'=' and a GGUF tensor name")) return nullptr;
    if (!at(TokenKind::String)) {
      error_expected("a GGUF tensor name string");
      return nullptr;
    }
    w->gguf_name = tok().text;
    w->gguf_name_range = tok().range;
    take();
    if (at_word("else")) {
      take();
      if (!at(TokenKind::String)) {
        error_expected("a fallback GGUF tensor name string after 'else'");
        return nullptr;
      }
      w->fallback = tok().text;
      w->fallback_range = tok().range;
      take();
    } else if (at_word("optional") && peek(1).kind != TokenKind::Colon) {  // not a weight named optional
      take();
      w->optional = true;
    }
    w->range = from(w->name_range);
    return w;
  }

  // layer_block = "layer" "weights" "(" IDENT "in" expr ")" "{" weight_body* "}"
  bool parse_layer_block(Module& m) {
    SourceRange begin = take().range;  // layer
    auto b = std::make_unique<LayerWeightsDecl>();
    if (!expect_word("weights")) return false;
    if (!expect(TokenKind::LParen, "'('")) return false;
    if (!expect_identifier("the layer index name", b->index_name, b->index_range)) return false;
    if (!expect_word("in")) return false;
    b->count = parse_expr();
    if (!b->count) return false;
    if (!expect(TokenKind::RParen, "')'")) return false;
    SourceRange open_brace = tok().range;
    if (!expect(TokenKind::LBrace, "'{'")) return false;
    while (!at(TokenKind::RBrace) && !too_many_errors()) {
      if (at(TokenKind::End) || (tok().at_line_start && is_decl_keyword(tok()))) {
        error_unclosed(open_brace);
        m.layer_weights = std::move(b);
        return true;  // already at a recovery point
      }
      size_t start = pos_;
      if (auto w = parse_weight_body(true)) {
        b->weights.push_back(std::move(w));
      } else {
        sync_in_block(start);
      }
    }
    take();  // }
    b->range = from(begin);
    m.layer_weights = std::move(b);
    return true;
  }

  // tensor_type = DTYPE "[" expr ("," expr)* "]"       DTYPE = a type of the list with in_dsl (f32 | f16 | q8_0 | i32)
  bool parse_tensor_type(TypeExpr& t) {
    if (!at(TokenKind::Identifier) || !parse_dtype(tok().text, t.dtype)) {
      error_expected("a tensor type (" + dtype_names([](const ops::DTypeRow& r) { return r.in_dsl; }) + ")");
      return false;
    }
    t.dtype_range = tok().range;
    take();
    if (!expect(TokenKind::LBracket, "'[' and the dimensions")) return false;
    for (;;) {
      ExprPtr d = parse_expr();
      if (!d) return false;
      t.dims.push_back(std::move(d));
      if (at(TokenKind::Comma)) {
        take();
        continue;
      }
      if (!expect(TokenKind::RBracket, "',' or ']'")) return false;
      break;
    }
    t.range = from(t.dtype_range);
    return true;
  }

  // forward_decl = "forward" "(" input ("," input)* ")" "->" tensor_type "{" stmt* "}"
  // input = IDENT ":" tensor_type
  bool parse_forward(Module& m) {
    SourceRange begin = take().range;  // forward
    auto f = std::make_unique<ForwardDecl>();
    if (!expect(TokenKind::LParen, "'('")) return false;
    for (;;) {
      auto in = std::make_unique<InputDecl>();
      if (!expect_identifier("an input name", in->name, in->name_range)) return false;
      if (!expect(TokenKind::Colon, "':' and a tensor type")) return false;
      if (!parse_tensor_type(in->type)) return false;
      f->inputs.push_back(std::move(in));
      if (at(TokenKind::Comma)) {
        take();
        continue;
      }
      if (!expect(TokenKind::RParen, "',' or ')'")) return false;
      break;
    }
    if (!expect(TokenKind::Arrow, "'->' and the result type")) return false;
    if (!parse_tensor_type(f->result)) return false;
    SourceRange open_brace = tok().range;
    if (!expect(TokenKind::LBrace, "'{'")) return false;
    unclosed_reported_ = false;
    parse_block(f->body, 0, open_brace);  // an unclosed body ends at the next declaration (already there)
    f->range = from(begin);
    m.forward = std::move(f);
    return true;
  }

  // block = stmt* "}"   (the '{' is already consumed). Returns false when
  // the block was not closed (then the parser stands at a declaration
  // keyword or at the end).
  bool parse_block(std::vector<StmtPtr>& body, int loop_depth, const SourceRange& open_brace) {
    while (!at(TokenKind::RBrace) && !too_many_errors()) {
      if (at(TokenKind::End) || (tok().at_line_start && is_decl_keyword(tok()))) {
        if (!unclosed_reported_) error_unclosed(open_brace);
        unclosed_reported_ = true;  // an enclosing block is unclosed too; one message is enough
        return false;
      }
      size_t start = pos_;
      if (StmtPtr s = parse_stmt(loop_depth)) {
        body.push_back(std::move(s));
      } else {
        sync_in_block(start);
      }
    }
    if (too_many_errors()) return false;
    take();  // }
    return true;
  }

  // stmt = "for" IDENT "in" IDENT "{" stmt* "}"
  //      | "return" expr
  //      | IDENT "=" expr
  StmtPtr parse_stmt(int loop_depth) {
    if (at_word("for")) {
      if (loop_depth >= kMaxLoopDepth) {
        error(tok().range, "loops nested too deeply");
        return nullptr;
      }
      SourceRange begin = take().range;
      std::string var;
      SourceRange var_range;
      if (!expect_identifier("a loop variable", var, var_range)) return nullptr;
      auto f = std::make_unique<ForStmt>(begin, var, var_range);
      if (!expect_word("in")) return nullptr;
      if (!expect_identifier("'layers'", f->range_name, f->range_name_range)) return nullptr;
      SourceRange open_brace = tok().range;
      if (!expect(TokenKind::LBrace, "'{'")) return nullptr;
      parse_block(f->body, loop_depth + 1, open_brace);  // when unclosed, the error is reported; keep what was parsed
      f->range = from(begin);
      return f;
    }
    if (at_word("return")) {
      SourceRange begin = take().range;
      ExprPtr v = parse_expr();
      if (!v) return nullptr;
      return std::make_unique<ReturnStmt>(from(begin), std::move(v));
    }
    if (at(TokenKind::Identifier) && peek(1).kind == TokenKind::Assign) {
      std::string name = tok().text;
      SourceRange name_range = tok().range;
      take();
      take();  // =
      ExprPtr v = parse_expr();
      if (!v) return nullptr;
      return std::make_unique<AssignStmt>(from(name_range), name, name_range, std::move(v));
    }
    if (at(TokenKind::Identifier) && peek(1).kind == TokenKind::LParen) {
      error(tok().range, "a call cannot stand alone; assign its result: NAME = " + tok().text + "(...)");
      return nullptr;
    }
    if (at(TokenKind::Identifier)) {
      error(peek(1).range, "expected '=' after '" + tok().text + "', found " + describe(peek(1)));
      return nullptr;
    }
    error_expected_here("a statement (NAME = expression, for or return)");
    return nullptr;
  }

  // ------------------------------------------------------- expressions

  // Bounds the depth of the expression tree, so that hostile input cannot
  // exhaust the stack here or in the recursive passes over the AST. Each
  // nesting level (parentheses, calls, unary operators, each operator of a
  // chain such as a + b + c) adds one while it is being parsed.
  struct DepthCounter {
    Parser& p;
    int added = 0;
    explicit DepthCounter(Parser& parser) : p(parser) {}
    bool add() {
      ++p.depth_;
      ++added;
      if (p.depth_ <= kMaxExprDepth) return true;
      if (!p.depth_reported_) {
        p.depth_reported_ = true;
        p.error(p.tok().range, "expression nested too deeply (the limit is " + std::to_string(kMaxExprDepth) + ")");
      } else {
        ++p.errors_;  // keeps the statement failed without repeating the message
      }
      return false;
    }
    ~DepthCounter() {
      p.depth_ -= added;
      if (p.depth_ == 0) p.depth_reported_ = false;
    }
  };

  // expr = or_expr
  ExprPtr parse_expr() {
    DepthCounter depth(*this);
    if (!depth.add()) return nullptr;
    return parse_or();
  }

  // Left-associative binary levels share this loop; `op_of` maps a token to
  // the operator of this level.
  template <class Next, class OpOf>
  ExprPtr parse_left_assoc(Next next, OpOf op_of) {
    ExprPtr lhs = (this->*next)();
    if (!lhs) return nullptr;
    DepthCounter depth(*this);
    BinaryOp op;
    while (op_of(tok().kind, op)) {
      if (!depth.add()) return nullptr;
      take();
      ExprPtr rhs = (this->*next)();
      if (!rhs) return nullptr;
      SourceRange r = merge(lhs->range, rhs->range);
      lhs = std::make_unique<BinaryExpr>(r, op, std::move(lhs), std::move(rhs));
    }
    return lhs;
  }

  // or_expr = and_expr ("||" and_expr)*
  ExprPtr parse_or() {
    return parse_left_assoc(&Parser::parse_and, [](TokenKind k, BinaryOp& op) {
      op = BinaryOp::Or;
      return k == TokenKind::OrOr;
    });
  }

  // and_expr = cmp_expr ("&&" cmp_expr)*
  ExprPtr parse_and() {
    return parse_left_assoc(&Parser::parse_cmp, [](TokenKind k, BinaryOp& op) {
      op = BinaryOp::And;
      return k == TokenKind::AndAnd;
    });
  }

  static bool cmp_op(TokenKind k, BinaryOp& op) {
    switch (k) {
      case TokenKind::EqEq: op = BinaryOp::Eq; return true;
      case TokenKind::NotEq: op = BinaryOp::Ne; return true;
      case TokenKind::Less: op = BinaryOp::Lt; return true;
      case TokenKind::LessEq: op = BinaryOp::Le; return true;
      case TokenKind::Greater: op = BinaryOp::Gt; return true;
      case TokenKind::GreaterEq: op = BinaryOp::Ge; return true;
      default: return false;
    }
  }

  // cmp_expr = add_expr [("==" | "!=" | "<" | "<=" | ">" | ">=") add_expr]
  ExprPtr parse_cmp() {
    ExprPtr lhs = parse_add();
    if (!lhs) return nullptr;
    BinaryOp op;
    if (!cmp_op(tok().kind, op)) return lhs;
    take();
    ExprPtr rhs = parse_add();
    if (!rhs) return nullptr;
    if (cmp_op(tok().kind, op)) {
      error(tok().range, "comparisons cannot be chained; use '&&'");
      return nullptr;
    }
    SourceRange r = merge(lhs->range, rhs->range);
    return std::make_unique<BinaryExpr>(r, op, std::move(lhs), std::move(rhs));
  }

  // add_expr = mul_expr (("+" | "-") mul_expr)*
  ExprPtr parse_add() {
    return parse_left_assoc(&Parser::parse_mul, [](TokenKind k, BinaryOp& op) {
      op = k == TokenKind::Plus ? BinaryOp::Add : BinaryOp::Sub;
      return k == TokenKind::Plus || k == TokenKind::Minus;
    });
  }

  // mul_expr = unary_expr (("*" | "/" | "%") unary_expr)*
  ExprPtr parse_mul() {
    return parse_left_assoc(&Parser::parse_unary, [](TokenKind k, BinaryOp& op) {
      op = k == TokenKind::Star ? BinaryOp::Mul : k == TokenKind::Slash ? BinaryOp::Div : BinaryOp::Mod;
      return k == TokenKind::Star || k == TokenKind::Slash || k == TokenKind::Percent;
    });
  }

  // unary_expr = ("-" | "!") unary_expr | postfix_expr
  ExprPtr parse_unary() {
    if (at(TokenKind::Minus) || at(TokenKind::Not)) {
      DepthCounter depth(*this);
      if (!depth.add()) return nullptr;
      SourceRange begin = tok().range;
      UnaryOp op = at(TokenKind::Minus) ? UnaryOp::Neg : UnaryOp::Not;
      take();
      ExprPtr x = parse_unary();
      if (!x) return nullptr;
      return std::make_unique<UnaryExpr>(merge(begin, x->range), op, std::move(x));
    }
    return parse_postfix();
  }

  // postfix_expr = primary ["[" expr "]"]
  ExprPtr parse_postfix() {
    ExprPtr base = parse_primary();
    if (!base) return nullptr;
    if (!at(TokenKind::LBracket)) return base;
    take();
    ExprPtr index = parse_expr();
    if (!index) return nullptr;
    if (!expect(TokenKind::RBracket, "']'")) return nullptr;
    SourceRange r = from(base->range);
    return std::make_unique<IndexExpr>(r, std::move(base), std::move(index));
  }

  // primary = INT | FLOAT | STRING | IDENT | call | "(" expr ")"
  // call    = IDENT "(" [arg ("," arg)*] ")"
  // arg     = [IDENT "="] expr
  ExprPtr parse_primary() {
    const Token& t = tok();
    switch (t.kind) {
      case TokenKind::Int: take(); return std::make_unique<IntLiteral>(t.range, t.int_value);
      case TokenKind::Float: take(); return std::make_unique<FloatLiteral>(t.range, t.float_value);
      case TokenKind::String: take(); return std::make_unique<StringLiteral>(t.range, t.text);
      case TokenKind::LParen: {
        take();
        ExprPtr e = parse_expr();
        if (!e) return nullptr;
        if (!expect(TokenKind::RParen, "')'")) return nullptr;
        return e;
      }
      case TokenKind::Identifier:
        if (!is_keyword(t)) break;
        error_expected("an expression");
        return nullptr;
      default: error_expected("an expression"); return nullptr;
    }
    take();
    if (!at(TokenKind::LParen)) return std::make_unique<NameExpr>(t.range, t.text);
    take();
    auto call = std::make_unique<CallExpr>(t.range, t.text, t.range);
    if (!at(TokenKind::RParen)) {
      for (;;) {
        Argument a;
        if (at(TokenKind::Identifier) && peek(1).kind == TokenKind::Assign) {
          a.keyword = tok().text;
          a.keyword_range = tok().range;
          take();
          take();
        }
        a.value = parse_expr();
        if (!a.value) return nullptr;
        call->args.push_back(std::move(a));
        if (at(TokenKind::Comma)) {
          take();
          continue;
        }
        break;
      }
    }
    if (!expect(TokenKind::RParen, "',' or ')' in the argument list")) return nullptr;
    call->range = from(t.range);
    return call;
  }

  std::string file_;
  const std::vector<Token>& toks_;
  DiagnosticEngine& diags_;
  size_t pos_ = 0;
  SourceLoc prev_end_{1, 1};
  int errors_ = 0;
  int depth_ = 0;
  bool depth_reported_ = false;
  bool unclosed_reported_ = false;
};

}  // namespace

std::unique_ptr<Module> parse(std::string_view filename, const std::vector<Token>& tokens, DiagnosticEngine& diags) {
  return Parser(filename, tokens, diags).run();
}

}  // namespace lumen::dsl
