// IR text parser: reads the form print_module() writes (ir/text.h) back into
// a Module. Recursive descent over a small token stream; every error names
// the line.
#include <algorithm>
#include <charconv>
#include <map>
#include <set>

#include "lumen/ir/text.h"

namespace lumen::ir {

namespace {

struct Token {
  enum class Kind { Ident, Value, Weight, Int, Float, String, Punct, End };
  Kind kind = Kind::End;
  std::string text;  // identifier, name after % or @, string contents, punctuation
  int line = 1;
  size_t begin = 0, end = 0;  // its bytes in the source
};

std::vector<Token> tokenize(std::string_view src) {
  std::vector<Token> out;
  int line = 1;
  size_t i = 0;
  auto fail = [&](const std::string& msg) { throw IrError("line " + std::to_string(line) + ": " + msg); };
  auto is_ident = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.'; };
  while (i < src.size()) {
    char c = src[i];
    if (c == '\n') { ++line; ++i; continue; }
    if (std::isspace(static_cast<unsigned char>(c))) { ++i; continue; }
    if (c == '/' && i + 1 < src.size() && src[i + 1] == '/') {
      while (i < src.size() && src[i] != '\n') ++i;
      continue;
    }
    Token t;
    t.line = line;
    t.begin = i;
    // `%name` is a value, `@name` a weight; a lone `%` is the modulo operator.
    if ((c == '%' || c == '@') && i + 1 < src.size() && is_ident(src[i + 1])) {
      size_t start = ++i;
      while (i < src.size() && is_ident(src[i])) ++i;
      t.kind = c == '%' ? Token::Kind::Value : Token::Kind::Weight;
      t.text = std::string(src.substr(start, i - start));
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t start = i;
      bool is_float = false;
      while (i < src.size()) {
        char d = src[i];
        if (std::isdigit(static_cast<unsigned char>(d))) { ++i; continue; }
        if (d == '.' || d == 'e' || d == 'E') {
          is_float = true;
          ++i;
          if ((d == 'e' || d == 'E') && i < src.size() && (src[i] == '-' || src[i] == '+')) ++i;
          continue;
        }
        break;
      }
      t.kind = is_float ? Token::Kind::Float : Token::Kind::Int;
      t.text = std::string(src.substr(start, i - start));
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t start = i;
      while (i < src.size() && (std::isalnum(static_cast<unsigned char>(src[i])) || src[i] == '_')) ++i;
      t.kind = Token::Kind::Ident;
      t.text = std::string(src.substr(start, i - start));
    } else if (c == '"') {
      ++i;
      t.kind = Token::Kind::String;
      while (true) {
        if (i >= src.size() || src[i] == '\n') fail("unterminated string");
        if (src[i] == '"') { ++i; break; }
        if (src[i] == '\\') {
          if (i + 1 >= src.size()) fail("unterminated string");
          ++i;
        }
        t.text += src[i++];
      }
    } else {
      static const char* two[] = {"->", "==", "!=", "<=", ">="};
      t.kind = Token::Kind::Punct;
      for (const char* p : two) {
        if (src.substr(i, 2) == p) t.text = p;
      }
      if (t.text.empty()) {
        if (std::string_view("()[]{},:=+-*/%<>?").find(c) == std::string_view::npos)
          fail(std::string("unexpected character '") + c + "'");
        t.text = std::string(1, c);
      }
      i += t.text.size();
    }
    t.end = i;
    out.push_back(std::move(t));
  }
  Token end;
  end.line = line;
  end.begin = end.end = src.size();
  out.push_back(end);
  return out;
}

class Parser {
 public:
  explicit Parser(std::string_view text) : src_(text), toks_(tokenize(text)) {}

  /// module ::= "module" ident ["source" string] decl* function [memory]
  Module parse_module() {
    expect_ident("module");
    m_.name = take_ident("the module name");
    if (accept_ident("source")) m_.source = take(Token::Kind::String, "a file name").text;
    while (true) {
      if (accept_ident("param")) parse_param();
      else if (accept_ident("check")) parse_check();
      else if (accept_ident("weight")) parse_weight();
      else break;
    }
    parse_function();
    if (accept_ident("memory")) parse_memory();
    if (peek().kind != Token::Kind::End) fail("unexpected '" + peek().text + "' after the function");
    return std::move(m_);
  }

  /// dim: the one language of sizes, read by its own parser (ops/dim.h)
  Dim parse_dim() {
    const Token& first = peek();
    size_t consumed = 0;
    Dim d;
    try {
      d = ops::parse_dim_prefix(src_.substr(first.begin), &consumed);
    } catch (const ops::DimParseError& e) {
      fail_at(line_of(first.begin + e.offset), e.what());
    }
    const size_t end = first.begin + consumed;
    while (peek().kind != Token::Kind::End && peek().begin < end) {
      if (peek().end > end) fail("bad dimension: '" + describe(peek()) + "'");
      next();
    }
    return d;
  }

 private:
  // ---------------------------------------------------------- token helpers
  const Token& peek(size_t ahead = 0) const { return toks_[std::min(pos_ + ahead, toks_.size() - 1)]; }
  const Token& next() {
    const Token& t = toks_[pos_];
    if (pos_ + 1 < toks_.size()) ++pos_;
    return t;
  }
  [[noreturn]] void fail(const std::string& msg) const {
    throw IrError("line " + std::to_string(peek().line) + ": " + msg);
  }
  [[noreturn]] void fail_at(int line, const std::string& msg) const {
    throw IrError("line " + std::to_string(line) + ": " + msg);
  }
  bool is_punct(std::string_view p) const { return peek().kind == Token::Kind::Punct && peek().text == p; }
  bool is_ident(std::string_view s) const { return peek().kind == Token::Kind::Ident && peek().text == s; }
  std::string take_punct() { return next().text; }
  bool accept_punct(std::string_view p) {
    if (!is_punct(p)) return false;
    next();
    return true;
  }
  void expect_punct(std::string_view p) {
    if (!accept_punct(p)) fail("expected '" + std::string(p) + "', found '" + describe(peek()) + "'");
  }
  bool accept_ident(std::string_view s) {
    if (!is_ident(s)) return false;
    next();
    return true;
  }
  void expect_ident(std::string_view s) {
    if (!accept_ident(s)) fail("expected '" + std::string(s) + "', found '" + describe(peek()) + "'");
  }
  std::string take_ident(const char* what) { return take(Token::Kind::Ident, what).text; }
  const Token& take(Token::Kind kind, const char* what) {
    if (peek().kind != kind) fail(std::string("expected ") + what + ", found '" + describe(peek()) + "'");
    return next();
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::End: return "end of input";
      case Token::Kind::Value: return "%" + t.text;
      case Token::Kind::Weight: return "@" + t.text;
      case Token::Kind::String: return "\"" + t.text + "\"";
      default: return t.text;
    }
  }
  int64_t parse_int(const std::string& text) {
    int64_t v = 0;
    auto res = std::from_chars(text.data(), text.data() + text.size(), v);
    if (res.ec != std::errc() || res.ptr != text.data() + text.size()) fail("bad integer '" + text + "'");
    return v;
  }

  /// number ::= ["-"] (int | float)
  double parse_number() {
    bool negative = accept_punct("-");
    if (peek().kind != Token::Kind::Int && peek().kind != Token::Kind::Float)
      fail("expected a number, found '" + describe(peek()) + "'");
    std::string text = next().text;
    double v = 0;
    auto res = std::from_chars(text.data(), text.data() + text.size(), v);
    if (res.ec != std::errc() || res.ptr != text.data() + text.size()) fail("bad number '" + text + "'");
    return negative ? -v : v;
  }

  std::vector<Dim> parse_shape() {
    std::vector<Dim> shape;
    expect_punct("[");
    if (!accept_punct("]")) {
      do shape.push_back(parse_dim());
      while (accept_punct(","));
      expect_punct("]");
    }
    return shape;
  }

  /// type ::= "?" | dtype "[" [dim ("," dim)*] "]"
  Type parse_type() {
    if (accept_punct("?")) return Type::open();
    std::string name = take_ident("a dtype");
    auto dtype = ops::parse_dtype(name);
    if (!dtype) fail("unknown dtype '" + name + "'");
    return Type::of(*dtype, parse_shape());
  }

  // --------------------------------------------------------- declarations
  /// param ::= "param" ident ":" ("int"|"float") "=" (key | len | const | dim)
  /// key ::= "key" "(" string ["," "default" "=" (number | dim)] ")" ; len ::= "len" "(" string ")"
  /// const ::= "const" "(" number ")"
  void parse_param() {
    Param p;
    p.line = peek().line;
    p.name = take_ident("a param name");
    expect_punct(":");
    std::string kind = take_ident("'int' or 'float'");
    if (kind != "int" && kind != "float") fail("expected 'int' or 'float', found '" + kind + "'");
    p.kind = kind == "int" ? Param::Kind::Int : Param::Kind::Float;
    expect_punct("=");
    if (is_ident("key") && peek(1).kind == Token::Kind::Punct && peek(1).text == "(") {
      next();
      next();
      p.source = Param::Source::Key;
      p.gguf_key = take(Token::Kind::String, "a metadata key").text;
      if (accept_punct(",")) {
        expect_ident("default");
        expect_punct("=");
        bool negative = is_punct("-") && (peek(1).kind == Token::Kind::Int || peek(1).kind == Token::Kind::Float);
        size_t number_at = pos_ + (negative ? 1 : 0);
        bool single_number = (toks_[number_at].kind == Token::Kind::Int || toks_[number_at].kind == Token::Kind::Float) &&
                             toks_[number_at + 1].kind == Token::Kind::Punct && toks_[number_at + 1].text == ")";
        if (single_number) {
          p.default_value = parse_number();
        } else {
          p.default_expr = parse_dim();
        }
      }
      expect_punct(")");
    } else if (is_ident("const") && peek(1).kind == Token::Kind::Punct && peek(1).text == "(") {
      next();
      next();
      p.source = Param::Source::Constant;
      p.default_value = parse_number();
      expect_punct(")");
    } else if (is_ident("len") && peek(1).kind == Token::Kind::Punct && peek(1).text == "(") {
      next();
      next();
      p.source = Param::Source::Length;
      p.gguf_key = take(Token::Kind::String, "a metadata key").text;
      expect_punct(")");
    } else {
      p.source = Param::Source::Derived;
      p.derived = parse_dim();
    }
    if (m_.find_param(p.name)) fail_at(p.line, "param '" + p.name + "' defined twice");
    m_.params.push_back(std::move(p));
  }

  /// check ::= "check" dim cmp dim ":" string
  void parse_check() {
    Check c;
    c.line = peek().line;
    c.lhs = parse_dim();
    static const std::map<std::string, Check::Cmp> cmps = {
        {"==", Check::Cmp::Eq}, {"!=", Check::Cmp::Ne}, {"<", Check::Cmp::Lt},
        {"<=", Check::Cmp::Le}, {">", Check::Cmp::Gt},  {">=", Check::Cmp::Ge}};
    auto it = peek().kind == Token::Kind::Punct ? cmps.find(peek().text) : cmps.end();
    if (it == cmps.end()) fail("expected a comparison, found '" + describe(peek()) + "'");
    next();
    c.cmp = it->second;
    c.rhs = parse_dim();
    expect_punct(":");
    c.message = take(Token::Kind::String, "a message").text;
    m_.checks.push_back(std::move(c));
  }

  /// weight ::= "weight" "@" name ["[" "l" "]"] ":" dtype shape "=" string ["else" string | "optional"]
  ///            ["types" "(" dtype ("," dtype)* ")"]
  void parse_weight() {
    Weight w;
    w.line = peek().line;
    w.name = take(Token::Kind::Weight, "a weight name (@name)").text;
    if (accept_punct("[")) {
      expect_ident("l");
      expect_punct("]");
      w.per_layer = true;
    }
    expect_punct(":");
    Type t = parse_type();
    if (!t.known) fail("a weight needs a dtype and shape");
    w.dtype = t.dtype;
    w.shape = t.shape;
    expect_punct("=");
    w.gguf_name = take(Token::Kind::String, "a tensor name").text;
    if (accept_ident("else")) w.fallback = take(Token::Kind::String, "a tensor name").text;
    else if (accept_ident("optional")) w.optional = true;
    if (accept_ident("types")) {
      expect_punct("(");
      do {
        const std::string name = take(Token::Kind::Ident, "a weight type").text;
        std::optional<DType> d = ops::parse_dtype(name);
        if (!d || !ops::row(*d).weight) fail_at(w.line, "'" + name + "' is not a weight type");
        w.types.push_back(*d);
      } while (accept_punct(","));
      expect_punct(")");
    }
    if (m_.find_weight(w.name)) fail_at(w.line, "weight '@" + w.name + "' defined twice");
    m_.weights.push_back(std::move(w));
  }

  // ------------------------------------------------------------ function
  ValueId define(const std::string& name, Type type) {
    if (names_.count(name)) fail("value %" + name + " defined twice");
    ValueId v = m_.forward.new_value(std::move(type));
    names_[name] = v;
    return v;
  }
  ValueId use(const std::string& name) {
    auto it = names_.find(name);
    if (it == names_.end()) fail_at(toks_[pos_ > 0 ? pos_ - 1 : 0].line, "use of undefined value %" + name);
    return it->second;
  }
  WeightRef weight_ref(const std::string& name) {
    WeightRef ref{name, false};
    if (accept_punct("[")) {
      expect_ident("l");
      expect_punct("]");
      ref.per_layer = true;
    }
    return ref;
  }

  /// function ::= "func" "@forward" "(" value ":" type ")" "->" type "{" op* [loop] op* "return" value "}"
  void parse_function() {
    Function& f = m_.forward;
    expect_ident("func");
    const Token& fname = take(Token::Kind::Weight, "@forward");
    if (fname.text != "forward") fail("the function must be @forward");
    expect_punct("(");
    if (peek().kind == Token::Kind::Value) {
      std::string name = next().text;
      expect_punct(":");
      f.tokens = define(name, parse_type());
    }
    expect_punct(")");
    expect_punct("->");
    f.result_type = parse_type();
    expect_punct("{");
    std::vector<Op>* ops = &f.pre;
    while (!accept_ident("return")) {
      if (peek().kind != Token::Kind::Value) fail("expected an op, 'layers' or 'return', found '" + describe(peek()) + "'");
      // A loop starts `%a[, %b] = layers`.
      size_t ahead = 1;
      while (peek(ahead).kind == Token::Kind::Punct && peek(ahead).text == "," &&
             peek(ahead + 1).kind == Token::Kind::Value)
        ahead += 2;
      bool is_loop = peek(ahead).text == "=" && peek(ahead + 1).kind == Token::Kind::Ident &&
                     peek(ahead + 1).text == "layers";
      if (is_loop) {
        if (f.loop) fail("only one layer loop is allowed");
        parse_loop();
        ops = &f.post;
      } else {
        ops->push_back(parse_op());
      }
    }
    f.result = use(take(Token::Kind::Value, "the returned value").text);
    expect_punct("}");
  }

  /// loop ::= value ("," value)* "=" "layers" dim "iter" "(" value "=" value ":" type ("," ...)* ")" "{" op* "yield" values "}"
  void parse_loop() {
    LayerLoop loop;
    loop.line = peek().line;
    std::vector<std::string> results;
    do results.push_back(take(Token::Kind::Value, "a loop result").text);
    while (accept_punct(","));
    expect_punct("=");
    expect_ident("layers");
    loop.trip_count = parse_dim();
    expect_ident("iter");
    expect_punct("(");
    std::vector<Type> result_types;
    do {
      Carried c;
      std::string arg = take(Token::Kind::Value, "a block argument").text;
      expect_punct("=");
      c.init = use(take(Token::Kind::Value, "an initial value").text);
      expect_punct(":");
      Type t = parse_type();
      c.arg = define(arg, t);
      loop.carried.push_back(c);
      result_types.push_back(t);
    } while (accept_punct(","));
    expect_punct(")");
    if (results.size() != loop.carried.size())
      fail("the loop has " + std::to_string(results.size()) + " results but " +
           std::to_string(loop.carried.size()) + " carried values");
    expect_punct("{");
    while (!accept_ident("yield")) loop.body.push_back(parse_op());
    for (size_t i = 0; i < loop.carried.size(); ++i) {
      if (i) expect_punct(",");
      loop.carried[i].yield = use(take(Token::Kind::Value, "a yielded value").text);
    }
    expect_punct("}");
    // Results are visible after the loop only.
    for (size_t i = 0; i < loop.carried.size(); ++i)
      loop.carried[i].result = define(results[i], result_types[i]);
    m_.forward.loop = std::move(loop);
  }

  /// op ::= value "=" opname input ("," input)* ":" "(" types ")" "->" type ["{" attr ("," attr)* "}"] ["line" int]
  Op parse_op() {
    Op op;
    std::string result = take(Token::Kind::Value, "a result").text;
    expect_punct("=");
    std::string kind = take_ident("an op name");
    auto k = ops::parse_op(kind);
    if (!k) fail("unknown op '" + kind + "'");
    op.kind = *k;
    do {
      if (peek().kind == Token::Kind::Value) op.operands.push_back(use(next().text));
      else if (peek().kind == Token::Kind::Weight) op.weights.push_back(weight_ref(next().text));
      else fail("expected an operand, found '" + describe(peek()) + "'");
    } while (accept_punct(","));
    expect_punct(":");
    expect_punct("(");
    std::vector<Type> types;
    if (!accept_punct(")")) {
      do types.push_back(parse_type());
      while (accept_punct(","));
      expect_punct(")");
    }
    if (types.size() != op.operands.size())
      fail(std::to_string(types.size()) + " operand types for " + std::to_string(op.operands.size()) + " operands");
    for (size_t i = 0; i < types.size(); ++i)
      if (!(types[i] == m_.forward.type(op.operands[i])))
        fail("operand " + std::to_string(i) + " has type " + m_.forward.type(op.operands[i]).str() +
             ", not " + types[i].str());
    expect_punct("->");
    Type result_type = parse_type();
    if (accept_punct("{")) {
      do parse_attr(op);
      while (accept_punct(","));
      expect_punct("}");
    }
    if (accept_ident("line")) op.line = static_cast<int>(parse_int(take(Token::Kind::Int, "a line number").text));
    op.result = define(result, result_type);
    return op;
  }

  /// attr ::= "epilogue" "=" ename ["(" (weight | value) ("," ...)* ")"] | ident "=" (string | dim)
  void parse_attr(Op& op) {
    std::string key = take_ident("an attribute name");
    expect_punct("=");
    if (key == "epilogue") {
      std::string name = take_ident("an epilogue");
      std::optional<Epilogue> epilogue = ops::parse_epilogue(name);
      if (!epilogue) fail("unknown epilogue '" + name + "'");
      op.epilogue = *epilogue;
      if (accept_punct("(")) {
        do {
          if (peek().kind == Token::Kind::Weight) op.biases.push_back(weight_ref(next().text));
          else if (peek().kind == Token::Kind::Value) {
            if (op.residual != kNoValue) fail("two residuals");
            op.residual = use(next().text);
          } else fail("expected a bias (@name) or a residual (%value)");
        } while (accept_punct(","));
        expect_punct(")");
      }
      return;
    }
    static const std::set<std::string> ident_attrs = {"eps", "base", "mode"};
    static const std::set<std::string> int_attrs = {"rows_per_task", "tokens_per_task"};
    if (op.attr(key)) fail("attribute '" + key + "' given twice");
    if (peek().kind == Token::Kind::String) {
      op.set_attr(key, Attr::string(next().text));
    } else if (ident_attrs.count(key)) {
      op.set_attr(key, Attr::ident(take_ident("a name")));
    } else if (int_attrs.count(key)) {
      bool negative = accept_punct("-");
      int64_t v = parse_int(take(Token::Kind::Int, "an integer").text);
      op.set_attr(key, Attr::integer(negative ? -v : v));
    } else {
      op.set_attr(key, Attr::of_dim(parse_dim()));
    }
  }

  /// memory ::= "memory" "arena" "=" dim "{" ("buffer" int ":" dtype "[" dim "," dim "]" "at" dim "size" dim "holds" values)* "}"
  void parse_memory() {
    MemoryPlan plan;
    expect_ident("arena");
    expect_punct("=");
    plan.arena_bytes = parse_dim();
    expect_punct("{");
    while (accept_ident("buffer")) {
      ArenaBuffer b;
      int64_t index = parse_int(take(Token::Kind::Int, "a buffer number").text);
      if (index != static_cast<int64_t>(plan.buffers.size())) fail("buffers must be numbered 0, 1, ... in order");
      expect_punct(":");
      Type t = parse_type();
      if (!t.known || t.shape.size() != 2) fail("a buffer type is dtype[rows, cols]");
      b.dtype = t.dtype;
      b.rows = t.shape[0];
      b.cols = t.shape[1];
      expect_ident("at");
      b.offset = parse_dim();
      expect_ident("size");
      b.bytes = parse_dim();
      expect_ident("holds");
      do b.values.push_back(use(take(Token::Kind::Value, "a value").text));
      while (accept_punct(","));
      plan.buffers.push_back(std::move(b));
    }
    expect_punct("}");
    m_.memory = std::move(plan);
  }

  int line_of(size_t offset) const {
    return 1 + static_cast<int>(std::count(src_.begin(), src_.begin() + static_cast<std::ptrdiff_t>(std::min(offset, src_.size())), '\n'));
  }

  std::string_view src_;
  std::vector<Token> toks_;
  size_t pos_ = 0;
  Module m_;
  std::map<std::string, ValueId> names_;
};

}  // namespace

Module parse_module(std::string_view text) { return Parser(text).parse_module(); }

}  // namespace lumen::ir
