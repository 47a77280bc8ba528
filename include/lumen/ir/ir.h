// The typed tensor IR: what the DSL lowers into, what the passes rewrite and
// what lower_to_program turns into a lumen::program::Program.
//
// A Module holds the model's params (bound to GGUF metadata), checks,
// weights (bound to GGUF tensors) and one function, `forward`. Values are in
// SSA form and carry a dtype and a symbolic shape (dims: ops/dim.h). The function is
// a straight line of ops, then at most one layer loop (a region run n_layer
// times whose block arguments carry values, the residual stream, from one
// iteration to the next), then another straight line of ops. That fixed
// shape is all decoder-only transformers need and keeps passes simple.
//
// The text form (ir/text.h) is documented in docs/architecture.md.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include "lumen/ops/dim.h"
#include "lumen/ops/op_list.h"

namespace lumen::ir {

// The IR's dims are the one language of sizes, with params by name.
using ops::Dim;

// ------------------------------------------------------------------ types
// Element types, operators and epilogues are the one list's (ops/op_list.h).
using ops::DType;
using ops::Epilogue;
using ops::OpId;
using ops::to_string;

// A tensor type. `known == false` is the open type `?` the lowering may leave
// for infer_shapes to fill in.
struct Type {
  bool known = false;
  DType dtype = DType::F32;
  std::vector<Dim> shape;  // activations are [rows, cols]; rows is N, or 1 after `last`

  static Type open() { return {}; }
  static Type of(DType dtype, std::vector<Dim> shape) { return {true, dtype, std::move(shape)}; }
  bool operator==(const Type& other) const = default;
  std::string str() const;  // "f32[N, n_embd]" or "?"
};

// ---------------------------------------------------------------- module
struct Param {
  enum class Kind : uint8_t { Int, Float };
  enum class Source : uint8_t {
    Key,      // key("gguf.key"[, default = number | expression])
    Length,   // len("gguf.key"): length of an array-valued key
    Derived,  // an expression over earlier params (`let`)
    Constant, // const(number): a value the program fixes (a literal eps or rope base in the DSL)
  };
  std::string name;
  Kind kind = Kind::Int;
  Source source = Source::Key;
  std::string gguf_key;                 // Key, Length
  std::optional<double> default_value;  // Key: numeric default when the key is absent; Constant: the value
  std::optional<Dim> default_expr;      // Key: default computed from earlier params
  std::optional<Dim> derived;           // Derived
  int line = 0;
};

struct Check {
  enum class Cmp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge };
  Dim lhs, rhs;
  Cmp cmp = Cmp::Eq;
  std::string message;
  int line = 0;
};
const char* to_string(Check::Cmp cmp);  // "==", ...

struct Weight {
  std::string name;       // DSL name, "wq"
  std::string gguf_name;  // "blk.{i}.attn_q.weight"
  bool per_layer = false;
  DType dtype = DType::F32;  // as declared: a weight type, or Any (the file's)
  std::vector<Dim> shape;  // DSL order: [rows, row_length]
  std::string fallback;    // gguf name used when gguf_name is absent
  bool optional = false;   // may be absent from the file (ops taking it do without)
  // The types of its tensors, bound by driver::compile (text: `types(q5_0, q6_k)`):
  // one per layer for a layer weight bound to a file's types, else one entry
  // (every layer's); empty until bound. Never Any.
  std::vector<DType> types;
  int line = 0;

  // The type of layer `layer`'s tensor (layer 0 for a global weight); bound only.
  DType type_of_layer(int64_t layer) const;
};

// A use of a weight by an op: `@wq[l]` (this layer's) or `@tok_embd`.
struct WeightRef {
  std::string name;
  bool per_layer = false;
  bool operator==(const WeightRef& other) const = default;
  std::string str() const;
};

// ------------------------------------------------------------------- ops
using ValueId = int;  // index into Function::values
constexpr ValueId kNoValue = -1;

// A typed attribute value. Param references (`eps = rms_eps`) are strings
// naming a param; enums (`mode = neox`) are identifiers; kernel names are
// quoted strings.
struct Attr {
  enum class Kind : uint8_t { Int, Dim, Ident, String };
  Kind kind = Kind::Int;
  int64_t int_value = 0;
  ir::Dim dim;
  std::string text;  // Ident, String

  static Attr integer(int64_t v) { Attr a; a.kind = Kind::Int; a.int_value = v; return a; }
  static Attr of_dim(ir::Dim d) { Attr a; a.kind = Kind::Dim; a.dim = std::move(d); return a; }
  static Attr ident(std::string s) { Attr a; a.kind = Kind::Ident; a.text = std::move(s); return a; }
  static Attr string(std::string s) { Attr a; a.kind = Kind::String; a.text = std::move(s); return a; }
  bool operator==(const Attr& other) const;
  std::string str() const;
};

struct Op {
  OpId kind = OpId::Add;
  ValueId result = kNoValue;
  std::vector<ValueId> operands;
  std::vector<WeightRef> weights;
  // MatMul: the epilogue fused into it; biases are concatenated like weights.
  Epilogue epilogue = Epilogue::None;
  std::vector<WeightRef> biases;
  ValueId residual = kNoValue;
  std::vector<std::pair<std::string, Attr>> attrs;  // in print order
  int line = 0;  // DSL line that produced the op (0: unknown)

  const Attr* attr(std::string_view name) const;
  void set_attr(const std::string& name, Attr value);  // replaces or appends
};

struct Value {
  Type type;
};

// The layer loop: `trip_count` iterations of `body`. Each carried value has
// a block argument (its value inside the body), an initial value from before
// the loop, the value yielded at the end of each iteration, and the loop's
// result after the last iteration.
struct Carried {
  ValueId arg = kNoValue, init = kNoValue, yield = kNoValue, result = kNoValue;
};
struct LayerLoop {
  Dim trip_count;
  std::vector<Carried> carried;
  std::vector<Op> body;
  int line = 0;
};

// A buffer of the activation arena (filled by plan_memory).
struct ArenaBuffer {
  DType dtype = DType::F32;
  Dim rows, cols;
  Dim offset;  // bytes, 64-aligned
  Dim bytes;   // size, 64-aligned
  std::vector<ValueId> values;  // values stored here (views and in-place results included)
};
struct MemoryPlan {
  std::vector<ArenaBuffer> buffers;
  Dim arena_bytes;
};

struct Function {
  std::vector<Value> values;
  ValueId tokens = kNoValue;  // the argument: i32[N]
  std::vector<Op> pre;
  std::optional<LayerLoop> loop;
  std::vector<Op> post;
  ValueId result = kNoValue;  // the returned logits
  Type result_type;

  ValueId new_value(Type type = Type::open());
  Type& type(ValueId v) { return values.at(static_cast<size_t>(v)).type; }
  const Type& type(ValueId v) const { return values.at(static_cast<size_t>(v)).type; }
};

struct Module {
  std::string name;    // the architecture (general.architecture)
  std::string source;  // the DSL file name, "qwen2.dsl"
  std::vector<Param> params;
  std::vector<Check> checks;
  std::vector<Weight> weights;
  Function forward;
  std::optional<MemoryPlan> memory;

  const Param* find_param(std::string_view name) const;
  const Weight* find_weight(std::string_view name) const;
};

// ----------------------------------------------------------- use helpers
// Every value an op reads (operands, then the residual).
std::vector<ValueId> op_inputs(const Op& op);
// Calls fn on each op of the function in program order (pre, body, post).
void for_each_op(Function& f, const std::function<void(Op&)>& fn);
void for_each_op(const Function& f, const std::function<void(const Op&)>& fn);
// Number of reads of `v`: op inputs, loop inits and yields, the return.
int use_count(const Function& f, ValueId v);
// Replaces every read of `from` with `to`.
void replace_uses(Function& f, ValueId from, ValueId to);

// Thrown for malformed IR text and by passes on IR they cannot handle.
// `line` is the DSL line of the op at fault (Op::line) when a pass blames
// one, so that the driver can point at it; 0 otherwise.
struct IrError : std::runtime_error {
  explicit IrError(const std::string& message, int line = 0) : std::runtime_error(message), line(line) {}
  int line = 0;
};

}  // namespace lumen::ir
