// Pass infer_shapes: fills open result types from operand types (see passes.h).
#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {

using ir::Dim;
using ir::DType;
using ir::Op;
using ir::OpKind;
using ir::Type;

class ShapeInference {
 public:
  explicit ShapeInference(ir::Module& m) : m_(m), f_(m.forward) {}

  void run() {
    for (auto& op : f_.pre) infer(op);
    if (f_.loop) {
      for (auto& c : f_.loop->carried) {
        const Type& init = known(c.init, "the layer loop's initial value");
        unify(c.arg, init, "a loop argument");
      }
      for (auto& op : f_.loop->body) infer(op);
      for (auto& c : f_.loop->carried) {
        const Type& yield = known(c.yield, "the loop yield");
        if (!(yield == f_.type(c.arg)))
          fail("the layer loop yields " + yield.str() + " for a value that enters as " + f_.type(c.arg).str());
        unify(c.result, yield, "a loop result");
      }
    }
    for (auto& op : f_.post) infer(op);
    if (f_.result != ir::kNoValue) {
      const Type& r = known(f_.result, "the returned value");
      if (f_.result_type.known && !(f_.result_type == r))
        fail("forward returns " + r.str() + " but is declared to return " + f_.result_type.str());
      f_.result_type = r;
    }
  }

 private:
  [[noreturn]] void fail(const std::string& msg) { throw ir::IrError("infer_shapes: " + msg); }

  const Type& known(ir::ValueId v, const std::string& what) {
    const Type& t = f_.type(v);
    if (!t.known) fail(what + " has no type");
    return t;
  }

  void unify(ir::ValueId v, const Type& inferred, const std::string& what) {
    Type& t = f_.type(v);
    if (t.known && !(t == inferred)) fail(what + " is declared " + t.str() + " but computes " + inferred.str());
    t = inferred;
  }

  const ir::Weight& weight(const Op& op, size_t i) {
    if (i >= op.weights.size()) fail(detail::describe(op) + ": missing weight operand");
    const ir::Weight* w = m_.find_weight(op.weights[i].name);
    if (!w) fail(detail::describe(op) + ": unknown weight @" + op.weights[i].name);
    return *w;
  }

  // Operand i as a 2-D tensor of one of the given dtypes.
  const Type& matrix(const Op& op, size_t i, std::initializer_list<DType> dtypes) {
    if (i >= op.operands.size()) fail(detail::describe(op) + ": missing operand " + std::to_string(i));
    const Type& t = known(op.operands[i], detail::describe(op) + " operand " + std::to_string(i));
    bool dtype_ok = false;
    for (DType d : dtypes) dtype_ok |= t.dtype == d;
    if (!dtype_ok || t.shape.size() != 2)
      fail(detail::describe(op) + ": operand " + std::to_string(i) + " must be a " + ir::to_string(*dtypes.begin()) +
           " matrix, not " + t.str());
    return t;
  }

  void expect_row_weight(const Op& op, size_t i, const Dim& cols) {
    const ir::Weight& w = weight(op, i);
    if (w.dtype != DType::F32 || w.shape.size() != 1 || !(w.shape[0] == cols))
      fail(detail::describe(op) + ": @" + w.name + " is " + Type::of(w.dtype, w.shape).str() + ", expected f32[" +
           cols.str() + "]");
  }

  Type matmul(const Op& op) {
    const Type& x = matrix(op, 0, {DType::F32, DType::ActQ8});
    std::optional<Dim> rows;
    for (size_t i = 0; i < op.weights.size(); ++i) {
      const ir::Weight& w = weight(op, i);
      if (w.shape.size() != 2) fail(detail::describe(op) + ": @" + w.name + " is not a matrix");
      if (!(w.shape[1] == x.shape[1]))
        fail(detail::describe(op) + ": cannot multiply " + x.str() + " by @" + w.name + " " +
             Type::of(w.dtype, w.shape).str() + " (row lengths " + x.shape[1].str() + " and " + w.shape[1].str() +
             " differ)");
      if (op.epilogue == ir::Epilogue::SiluMul) rows = w.shape[0];
      else rows = rows ? *rows + w.shape[0] : w.shape[0];
    }
    if (!rows) fail(detail::describe(op) + ": no weights");
    return Type::of(DType::F32, {x.shape[0], *rows});
  }

  Type compute(const Op& op) {
    std::string at = detail::describe(op);
    switch (op.kind) {
      case OpKind::Embed: {
        const Type& tokens = known(op.operands.at(0), at + " tokens");
        if (tokens.dtype != DType::I32 || tokens.shape.size() != 1) fail(at + ": tokens must be i32[N]");
        const ir::Weight& table = weight(op, 0);
        if (table.shape.size() != 2) fail(at + ": @" + table.name + " is not a matrix");
        return Type::of(DType::F32, {tokens.shape[0], table.shape[1]});
      }
      case OpKind::RmsNorm:
      case OpKind::RmsNormQuant: {
        const Type& x = matrix(op, 0, {DType::F32});
        expect_row_weight(op, 0, x.shape[1]);
        return Type::of(op.kind == OpKind::RmsNorm ? DType::F32 : DType::ActQ8, x.shape);
      }
      case OpKind::Quantize: return Type::of(DType::ActQ8, matrix(op, 0, {DType::F32}).shape);
      case OpKind::MatMul: return matmul(op);
      case OpKind::Rope:
      case OpKind::Silu:
      case OpKind::Softmax: return matrix(op, 0, {DType::F32});
      case OpKind::Attention: {
        const Type& q = matrix(op, 0, {DType::F32});
        const Type& k = matrix(op, 1, {DType::F32});
        const Type& v = matrix(op, 2, {DType::F32});
        if (!(k == v)) fail(at + ": k " + k.str() + " and v " + v.str() + " differ");
        if (!(k.shape[0] == q.shape[0])) fail(at + ": q and k have different row counts");
        return q;
      }
      case OpKind::Add:
      case OpKind::Mul: {
        const Type& a = matrix(op, 0, {DType::F32});
        if (!op.weights.empty()) {
          expect_row_weight(op, 0, a.shape[1]);
        } else {
          const Type& b = matrix(op, 1, {DType::F32});
          if (!(a == b)) fail(at + ": cannot combine " + a.str() + " and " + b.str());
        }
        return a;
      }
      case OpKind::SiluMul: {
        const Type& a = matrix(op, 0, {DType::F32});
        const Type& b = matrix(op, 1, {DType::F32});
        if (!(a == b)) fail(at + ": cannot combine " + a.str() + " and " + b.str());
        return a;
      }
      case OpKind::Last: return Type::of(DType::F32, {Dim::constant(1), matrix(op, 0, {DType::F32}).shape[1]});
      case OpKind::View: {
        const Type& x = known(op.operands.at(0), at + " operand");
        const ir::Attr* cols = op.attr("cols");
        if (!cols || cols->kind != ir::Attr::Kind::Dim || x.shape.size() != 2) fail(at + ": malformed view");
        return Type::of(x.dtype, {x.shape[0], cols->dim});
      }
    }
    fail(at + ": unknown op");
  }

  void infer(Op& op) {
    Type t = compute(op);
    if (op.residual != ir::kNoValue) {
      const Type& r = known(op.residual, detail::describe(op) + " residual");
      if (!(r == t)) fail(detail::describe(op) + ": residual " + r.str() + " does not match the result " + t.str());
    }
    unify(op.result, t, detail::describe(op) + " result");
  }

  ir::Module& m_;
  ir::Function& f_;
};

}  // namespace

void infer_shapes(ir::Module& m) { ShapeInference(m).run(); }

}  // namespace lumen::passes
