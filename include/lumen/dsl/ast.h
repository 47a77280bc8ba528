// The abstract syntax tree of a Lumen model program (.dsl), as the parser
// builds it and as semantic analysis annotates it. Optimized for simplicity:
// nodes own their children through unique_ptr, every node carries the source
// range it came from, and expressions have a kind tag for cheap casts.
//
// A program (see docs/dsl.md for the grammar) is:
//   model qwen2                                        -> Module::arch
//   param n_embd : int = key("{arch}.embedding_length") -> ParamDecl (Key)
//   param n_vocab : int = len("tokenizer.ggml.tokens")  -> ParamDecl (ArrayLength)
//   let head_dim = n_embd / n_head                      -> ParamDecl (Derived)
//   check n_embd % n_head == 0 : "message"              -> CheckDecl
//   weight tok_embd : q8_0[n_vocab, n_embd] = "token_embd.weight"   -> WeightDecl
//   layer weights (i in n_layer) { wq : q8_0[...] = "blk.{i}..." }  -> LayerWeightsDecl
//   forward(tokens : i32[N]) -> f32[1, n_vocab] { statements }      -> ForwardDecl
//
// Fields marked "sema" are filled by semantic analysis (check()); after a
// successful parse_and_check() they are all set. Shapes are written
// [rows, row_length] (numpy order); lowering to the Program reverses them.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/common/diagnostics.h"
#include "lumen/ops/op_table.h"

namespace lumen::dsl::ast {

// ------------------------------------------------------------------ types

// Element types are the one list's (ops/op_list.h): those with `in_dsl`.
using ops::DType;
using ops::to_string;
// "f32, f16, q8_0 or i32": the names of the list's types that `pick` keeps, for messages.
std::string dtype_names(bool (*pick)(const ops::DTypeRow&));

struct Expr;

// One symbolic dimension of a tensor type: an integer expression over params
// and the token count N, pointing into this module's AST (a weight's declared
// dims, the forward inputs' dims, or a scalar argument such as rope's heads).
// `expr == nullptr` means the constant `constant` (e.g. the 1 rows of last()).
struct Dim {
  const Expr* expr = nullptr;
  int64_t constant = 1;
  // A dim an op's type rule computes that no source expression spells (a
  // product or sum of operand dims): its canonical form and text. Set only
  // when `expr` is null; then `constant` is unused.
  std::shared_ptr<const ops::ShapeDim> derived;
};

struct TensorType {
  DType dtype = DType::F32;
  std::vector<Dim> dims;  // [rows, row_length] for 2-D; [N, cols] for activations
};

// What an expression denotes (sema).
enum class ValueKind {
  Unknown,  // not checked yet, or erroneous
  Int,      // scalar integer (params, literals, arithmetic over them)
  Float,    // scalar float
  Bool,     // comparison / logical result (checks)
  String,   // string literal (only as key()/len() arguments)
  Tensor,   // a tensor value; see ExprType::tensor
  Mode,     // a rope mode name: neox or normal
};

struct ExprType {
  ValueKind kind = ValueKind::Unknown;
  TensorType tensor;  // when kind == Tensor
};

// ------------------------------------------------------------ expressions

struct ParamDecl;
struct WeightDecl;
struct InputDecl;

struct Expr {
  enum class Kind { IntLiteral, FloatLiteral, StringLiteral, Name, Unary, Binary, Call, Index };
  const Kind kind;
  SourceRange range;
  ExprType type;  // sema

  virtual ~Expr() = default;
  Expr(const Expr&) = delete;
  Expr& operator=(const Expr&) = delete;

 protected:
  Expr(Kind k, SourceRange r) : kind(k), range(std::move(r)) {}
};
using ExprPtr = std::unique_ptr<Expr>;

// Checked downcast: returns nullptr when `e` is not a T (T::kKind).
template <class T>
const T* dyn_cast(const Expr* e) {
  return e != nullptr && e->kind == T::kKind ? static_cast<const T*>(e) : nullptr;
}
template <class T>
T* dyn_cast(Expr* e) {
  return e != nullptr && e->kind == T::kKind ? static_cast<T*>(e) : nullptr;
}

struct IntLiteral : Expr {
  static constexpr Kind kKind = Kind::IntLiteral;
  int64_t value;
  IntLiteral(SourceRange r, int64_t v) : Expr(kKind, std::move(r)), value(v) {}
};

struct FloatLiteral : Expr {
  static constexpr Kind kKind = Kind::FloatLiteral;
  double value;
  FloatLiteral(SourceRange r, double v) : Expr(kKind, std::move(r)), value(v) {}
};

struct StringLiteral : Expr {
  static constexpr Kind kKind = Kind::StringLiteral;
  std::string value;  // escapes already decoded
  StringLiteral(SourceRange r, std::string v) : Expr(kKind, std::move(r)), value(std::move(v)) {}
};

// What a name refers to (sema).
enum class NameKind {
  Unresolved,
  Param,        // a param or let: `param` points at it
  TokenCount,   // N, the symbolic number of tokens of this call
  Weight,       // a global weight: `weight`
  LayerWeight,  // a layer weight (only valid as `w[l]`): `weight`
  LayerIndex,   // the loop variable of `for l in layers`
  Input,        // a forward input: `input`
  Local,        // a value assigned in the forward body
  Mode,         // rope mode: `neox` or `normal`
};

struct NameExpr : Expr {
  static constexpr Kind kKind = Kind::Name;
  std::string name;
  NameKind resolved = NameKind::Unresolved;  // sema
  const ParamDecl* param = nullptr;          // sema, for Param
  const WeightDecl* weight = nullptr;        // sema, for Weight and LayerWeight
  const InputDecl* input = nullptr;          // sema, for Input
  NameExpr(SourceRange r, std::string n) : Expr(kKind, std::move(r)), name(std::move(n)) {}
};

enum class UnaryOp { Neg, Not };
const char* to_string(UnaryOp op);  // "-", "!"

struct UnaryExpr : Expr {
  static constexpr Kind kKind = Kind::Unary;
  UnaryOp op;
  ExprPtr operand;
  UnaryExpr(SourceRange r, UnaryOp o, ExprPtr x) : Expr(kKind, std::move(r)), op(o), operand(std::move(x)) {}
};

// On tensors, Add and Mul are the element-wise ops add/mul (with broadcast of
// a 1-D right or left operand along the rows); the others are scalar only.
enum class BinaryOp { Add, Sub, Mul, Div, Mod, Eq, Ne, Lt, Le, Gt, Ge, And, Or };
const char* to_string(BinaryOp op);  // "+", "-", "*", ...

struct BinaryExpr : Expr {
  static constexpr Kind kKind = Kind::Binary;
  BinaryOp op;
  ExprPtr lhs, rhs;
  BinaryExpr(SourceRange r, BinaryOp o, ExprPtr a, ExprPtr b)
      : Expr(kKind, std::move(r)), op(o), lhs(std::move(a)), rhs(std::move(b)) {}
};

// The builtin functions. Tensor ops (valid in the forward body): the ops of
// the list (ops/op_list.h) with `in_dsl`; their signatures are their op table
// entries (operands, then attributes; docs/dsl.md lists them).
// Scalar functions (valid in param declarations only):
//   key("gguf.key", default = expr)             a GGUF metadata value; "{arch}" expands to the model name
//   len("gguf.key")                             the length of a GGUF array value
// Scalar math (anywhere a scalar is expected): sqrt(x), min(a, b), max(a, b).
enum class ScalarFn { Key, Len, Sqrt, Min, Max };
const char* to_string(ScalarFn f);  // "key", "len", ...
std::optional<ScalarFn> scalar_fn_from_name(std::string_view name);
// A tensor op of the list callable from the DSL, by its name.
std::optional<ops::OpId> dsl_op_from_name(std::string_view name);
bool is_builtin(std::string_view name);  // a tensor op or a scalar function

struct Argument {
  std::string keyword;  // as written; empty for a positional argument
  SourceRange keyword_range;
  ExprPtr value;
  std::string param;    // sema: the builtin's parameter this argument binds to
};

struct CallExpr : Expr {
  static constexpr Kind kKind = Kind::Call;
  std::string callee;
  SourceRange callee_range;
  // From callee: the tensor op, or else the scalar function, it names (neither: unknown).
  std::optional<ops::OpId> op;
  std::optional<ScalarFn> fn;
  std::vector<Argument> args;
  CallExpr(SourceRange r, std::string c, SourceRange cr)
      : Expr(kKind, std::move(r)), callee(std::move(c)), callee_range(std::move(cr)),
        op(dsl_op_from_name(callee)), fn(scalar_fn_from_name(callee)) {}

  // The argument bound to the builtin parameter `param` (after sema), e.g.
  // find("heads"); nullptr when it was not given (the default applies).
  const Expr* find(std::string_view param) const;
};

// `wq[l]`: a layer weight of the current layer.
struct IndexExpr : Expr {
  static constexpr Kind kKind = Kind::Index;
  ExprPtr base;   // a NameExpr naming a layer weight
  ExprPtr index;  // a NameExpr naming the loop variable
  IndexExpr(SourceRange r, ExprPtr b, ExprPtr i) : Expr(kKind, std::move(r)), base(std::move(b)), index(std::move(i)) {}
};

// ----------------------------------------------------------- declarations

struct TypeExpr {
  DType dtype = DType::F32;
  SourceRange dtype_range;
  std::vector<ExprPtr> dims;  // integer expressions over params and N
  SourceRange range;
};

enum class ScalarType { Int, Float };
const char* to_string(ScalarType t);  // "int", "float"

// `param NAME : TYPE = key("K", default = E)` | `param NAME : TYPE = len("K")`
// | `let NAME = E`. Kept in source order: each may use only earlier ones.
struct ParamDecl {
  enum class Source { Key, ArrayLength, Derived };
  std::string name;
  SourceRange name_range;
  SourceRange range;         // the whole declaration
  Source source = Source::Key;
  ScalarType type = ScalarType::Int;  // declared for param; inferred for let (sema)
  std::string key;           // Key/ArrayLength: the GGUF key as written ("{arch}.embedding_length")
  std::string resolved_key;  // sema: "{arch}" replaced by the model name ("qwen2.embedding_length")
  SourceRange key_range;
  ExprPtr default_value;     // Key: used when the key is absent; nullptr = key required
  ExprPtr value;             // Derived: the defining expression
};

// `check COND : "message"`: evaluated on the resolved params at load time.
struct CheckDecl {
  ExprPtr condition;
  std::string message;
  SourceRange range;
};

// `NAME : TYPE = "gguf.name" [else "fallback.name" | optional]`, global (`weight ...`)
// or inside a `layer weights` block (then the names contain "{i}").
struct WeightDecl {
  std::string name;
  SourceRange name_range;
  SourceRange range;
  TypeExpr type;
  std::string gguf_name;
  SourceRange gguf_name_range;
  std::optional<std::string> fallback;  // used when gguf_name is absent from the file
  SourceRange fallback_range;
  bool optional = false;  // absent from the file is allowed: ops that take it then do without
  bool per_layer = false;
  bool used = false;  // sema: referenced by the forward body
};

// `layer weights (i in n_layer) { WEIGHT* }`
struct LayerWeightsDecl {
  std::string index_name;  // "i": the placeholder used in the names as "{i}"
  SourceRange index_range;
  ExprPtr count;           // number of layers (an int expression, usually a param)
  std::vector<std::unique_ptr<WeightDecl>> weights;
  SourceRange range;
};

// `NAME : TYPE` in the forward signature.
struct InputDecl {
  std::string name;
  SourceRange name_range;
  TypeExpr type;
};

// ------------------------------------------------------------- statements

struct Stmt {
  enum class Kind { Assign, For, Return };
  const Kind kind;
  SourceRange range;
  virtual ~Stmt() = default;
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;

 protected:
  Stmt(Kind k, SourceRange r) : kind(k), range(std::move(r)) {}
};
using StmtPtr = std::unique_ptr<Stmt>;

template <class T>
const T* dyn_cast(const Stmt* s) {
  return s != nullptr && s->kind == T::kKind ? static_cast<const T*>(s) : nullptr;
}
template <class T>
T* dyn_cast(Stmt* s) {
  return s != nullptr && s->kind == T::kKind ? static_cast<T*>(s) : nullptr;
}

// `NAME = EXPR`. Assigning to an existing name rebinds it (SSA renaming is
// the lowering's job). Inside the layer loop, rebinding a name defined before
// the loop makes it loop-carried (the residual stream x).
struct AssignStmt : Stmt {
  static constexpr Kind kKind = Kind::Assign;
  std::string name;
  SourceRange name_range;
  ExprPtr value;
  bool loop_carried = false;  // sema: rebinds, inside the loop, a value defined before it
  AssignStmt(SourceRange r, std::string n, SourceRange nr, ExprPtr v)
      : Stmt(kKind, std::move(r)), name(std::move(n)), name_range(std::move(nr)), value(std::move(v)) {}
};

// `for l in layers { STMT* }`: the body runs once per layer (the count of the
// `layer weights` block); `l` indexes layer weights. At most one, not nested.
struct ForStmt : Stmt {
  static constexpr Kind kKind = Kind::For;
  std::string var;
  SourceRange var_range;
  std::string range_name;  // must be "layers"
  SourceRange range_name_range;
  std::vector<StmtPtr> body;
  ForStmt(SourceRange r, std::string v, SourceRange vr) : Stmt(kKind, std::move(r)), var(std::move(v)), var_range(std::move(vr)) {}
};

// `return EXPR`: the logits; the last statement of the forward body.
struct ReturnStmt : Stmt {
  static constexpr Kind kKind = Kind::Return;
  ExprPtr value;
  ReturnStmt(SourceRange r, ExprPtr v) : Stmt(kKind, std::move(r)), value(std::move(v)) {}
};

// `forward(INPUT, ...) -> TYPE { STMT* }`
struct ForwardDecl {
  std::vector<std::unique_ptr<InputDecl>> inputs;  // exactly one: tokens : i32[N]
  TypeExpr result;                                  // f32[1, n_vocab]
  std::vector<StmtPtr> body;
  SourceRange range;
};

// ----------------------------------------------------------------- module

struct Module {
  std::string filename;
  std::string arch;  // the `model` name: the general.architecture value accepted, and "{arch}"
  SourceRange arch_range;
  std::vector<std::unique_ptr<ParamDecl>> params;  // params and lets, in source order
  std::vector<std::unique_ptr<CheckDecl>> checks;
  std::vector<std::unique_ptr<WeightDecl>> weights;  // global weights, in source order
  std::unique_ptr<LayerWeightsDecl> layer_weights;   // nullptr if the program has none
  std::unique_ptr<ForwardDecl> forward;

  const ParamDecl* find_param(std::string_view name) const;
  const WeightDecl* find_weight(std::string_view name) const;  // global or layer weight
};

// The source form of an expression, fully parenthesized only where needed:
// "n_head_kv * head_dim", "matmul(h, wq[l])".
std::string to_string(const Expr& e);
// `f32[N, n_embd]`; unknown parts print as "?".
std::string to_string(const TensorType& t);
std::string to_string(const ExprType& t);
std::string to_string(const Dim& d);

// The size an integer expression denotes, in the one language of sizes
// (ops/dim.h): integer literals, int params, N, + - * / %, unary -, min, max.
// nullopt for anything else, with *bad (when given) the first subexpression
// that is none of these.
std::optional<ops::Dim> to_dim(const Expr& e, const Expr** bad = nullptr);

// A stable, indented text dump of the whole module (with sema types when
// set), for tests and `lumenc --emit=ast`.
std::string dump(const Module& m);

}  // namespace lumen::dsl::ast
