// The IR in the op table's terms (ops/op_table.h): dims in canonical form
// with the module's lets substituted and its checks as facts, types, and the
// table's view of an op. The verifier and infer_shapes both use it, so the
// IR has the same type rules and the same dim equality as sema.
#pragma once

#include <map>
#include <optional>
#include <string>

#include "lumen/ir/ir.h"
#include "lumen/ops/op_table.h"

namespace lumen::ir {

class OpTypes {
 public:
  explicit OpTypes(const Module& m);

  ops::SymDim sym(const Dim& d) const;
  ops::ShapeDim shape_dim(const Dim& d) const { return {d, sym(d)}; }
  ops::TensorType type(const Type& t) const;  // t.known
  Type to_ir(const ops::TensorType& t) const;
  bool equal(const Type& a, const Type& b) const;  // both known
  const ops::DimFacts& facts() const { return facts_; }

  // The call the table's rule sees for `op`: operands by the entry's specs
  // (an `Either` operand is a value, else a weight), attributes, matmul's
  // epilogue. nullopt with `why` when an operand's type or weight is unknown.
  std::optional<ops::OpCall> call(const Op& op, const Function& f, std::string* why) const;

 private:
  const Module& m_;
  std::map<std::string, ops::SymDim> lets_;
  ops::DimFacts facts_;
};

}  // namespace lumen::ir
