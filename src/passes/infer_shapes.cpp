// Pass infer_shapes: fills open result types from operand types (see passes.h).
#include "lumen/ir/op_types.h"
#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {

using ir::Dim;
using ops::DType;
using ir::Op;
using ops::OpId;
using ir::Type;

class ShapeInference {
 public:
  explicit ShapeInference(ir::Module& m) : f_(m.forward), types_(m) {}

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
        if (!types_.equal(yield, f_.type(c.arg)))
          fail("the layer loop yields " + yield.str() + " for a value that enters as " + f_.type(c.arg).str());
        unify(c.result, yield, "a loop result");
      }
    }
    for (auto& op : f_.post) infer(op);
    if (f_.result != ir::kNoValue) {
      const Type& r = known(f_.result, "the returned value");
      if (f_.result_type.known && !types_.equal(f_.result_type, r))
        fail("forward returns " + r.str() + " but is declared to return " + f_.result_type.str());
      if (!f_.result_type.known) f_.result_type = r;
    }
  }

 private:
  [[noreturn]] void fail(const std::string& msg) { throw ir::IrError("infer_shapes: " + msg); }

  const Type& known(ir::ValueId v, const std::string& what) {
    const Type& t = f_.type(v);
    if (!t.known) fail(what + " has no type");
    return t;
  }

  // Sets v's type; a declared type stays when it equals the computed one
  // under the module's dim facts (it is the one the program wrote).
  void unify(ir::ValueId v, const Type& inferred, const std::string& what) {
    Type& t = f_.type(v);
    if (t.known && !types_.equal(t, inferred)) fail(what + " is declared " + t.str() + " but computes " + inferred.str());
    if (!t.known) t = inferred;
  }

  // The op table's rule for the op.
  Type compute(const Op& op) {
    std::string at = detail::describe(op);
    std::string why;
    std::optional<ops::OpCall> call = types_.call(op, f_, &why);
    if (!call) fail(at + ": " + why);
    ops::Verdict v = ops::infer(ops::op_info(op.kind), *call);
    if (!v.ok()) fail(at + ": " + v.message);
    return types_.to_ir(*v.result);
  }

  void infer(Op& op) {
    Type t = compute(op);
    unify(op.result, t, detail::describe(op) + " result");
  }

  ir::Function& f_;
  ir::OpTypes types_;
};

}  // namespace

void infer_shapes(ir::Module& m) { ShapeInference(m).run(); }

}  // namespace lumen::passes
