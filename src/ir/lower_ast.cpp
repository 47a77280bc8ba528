// AST -> IR lowering (see ir/lower_ast.h). Sema has already checked names,
// arities and shapes; what remains are the limits of the IR itself, reported
// as diagnostics at the offending source range.
#include "lumen/ir/lower_ast.h"

#include <algorithm>
#include <map>

#include "lumen/common/quote.h"

namespace lumen::ir {

namespace {

namespace ast = dsl::ast;

// Aborts the lowering after a diagnostic has been reported.
struct LoweringFailed {};

class AstLowering {
 public:
  AstLowering(const ast::Module& ast, DiagnosticEngine& diags) : ast_(ast), diags_(diags) {}

  Module run() {
    m_.name = ast_.arch;
    m_.source = ast_.filename.substr(ast_.filename.find_last_of('/') + 1);
    for (const auto& p : ast_.params) lower_param(*p);
    for (const auto& c : ast_.checks) lower_check(*c);
    for (const auto& w : ast_.weights) lower_weight(*w);
    if (ast_.layer_weights)
      for (const auto& w : ast_.layer_weights->weights) lower_weight(*w);
    if (!ast_.forward) error(ast_.arch_range, "the program has no forward function");
    lower_forward(*ast_.forward);
    return std::move(m_);
  }

 private:
  [[noreturn]] void error(const SourceRange& range, const std::string& msg) {
    diags_.error(range, msg);
    throw LoweringFailed{};
  }

  // ------------------------------------------------------------- scalars
  Dim dim(const ast::Expr& e) {
    const ast::Expr* bad = &e;
    if (auto d = ast::to_dim(e, &bad)) return *d;
    if (auto* name = ast::dyn_cast<ast::NameExpr>(bad);
        name && name->resolved == ast::NameKind::Param && name->param && name->param->type != ast::ScalarType::Int)
      error(bad->range, quoted(name->name) + " is a float: sizes must be integer expressions");
    error(bad->range, "cannot lower '" + ast::to_string(*bad) + "' to an integer size expression");
  }

  std::optional<double> number(const ast::Expr& e) {
    if (auto* i = ast::dyn_cast<ast::IntLiteral>(&e)) return static_cast<double>(i->value);
    if (auto* f = ast::dyn_cast<ast::FloatLiteral>(&e)) return f->value;
    if (auto* un = ast::dyn_cast<ast::UnaryExpr>(&e); un && un->op == ast::UnaryOp::Neg)
      if (auto v = number(*un->operand)) return -*v;
    return std::nullopt;
  }

  void lower_param(const ast::ParamDecl& p) {
    Param out;
    out.name = p.name;
    out.kind = p.type == ast::ScalarType::Int ? Param::Kind::Int : Param::Kind::Float;
    out.line = p.range.begin.line;
    std::string key = p.resolved_key.empty() ? p.key : p.resolved_key;
    switch (p.source) {
      case ast::ParamDecl::Source::Key:
        out.source = Param::Source::Key;
        out.gguf_key = key;
        if (p.default_value) {
          if (auto v = number(*p.default_value)) out.default_value = v;
          else out.default_expr = dim(*p.default_value);
        }
        break;
      case ast::ParamDecl::Source::ArrayLength:
        out.source = Param::Source::Length;
        out.gguf_key = key;
        break;
      case ast::ParamDecl::Source::Derived:
        out.source = Param::Source::Derived;
        if (out.kind != Param::Kind::Int) error(p.range, "a let must be an integer expression to be lowered");
        out.derived = dim(*p.value);
        break;
    }
    m_.params.push_back(std::move(out));
  }

  void lower_check(const ast::CheckDecl& c) {
    // `a && b` is two checks with the same message.
    std::vector<const ast::Expr*> pending = {c.condition.get()};
    while (!pending.empty()) {
      const ast::Expr* e = pending.back();
      pending.pop_back();
      auto* bin = ast::dyn_cast<ast::BinaryExpr>(e);
      if (bin && bin->op == ast::BinaryOp::And) {
        pending.push_back(bin->rhs.get());
        pending.push_back(bin->lhs.get());
        continue;
      }
      static const std::map<ast::BinaryOp, Check::Cmp> cmps = {
          {ast::BinaryOp::Eq, Check::Cmp::Eq}, {ast::BinaryOp::Ne, Check::Cmp::Ne}, {ast::BinaryOp::Lt, Check::Cmp::Lt},
          {ast::BinaryOp::Le, Check::Cmp::Le}, {ast::BinaryOp::Gt, Check::Cmp::Gt}, {ast::BinaryOp::Ge, Check::Cmp::Ge}};
      auto it = bin ? cmps.find(bin->op) : cmps.end();
      if (it == cmps.end()) error(e->range, "a check must be a comparison (or comparisons joined by &&)");
      Check out;
      out.lhs = dim(*bin->lhs);
      out.rhs = dim(*bin->rhs);
      out.cmp = it->second;
      out.message = c.message;
      out.line = c.range.begin.line;
      m_.checks.push_back(std::move(out));
    }
  }

  void lower_weight(const ast::WeightDecl& w) {
    Weight out;
    out.name = w.name;
    out.gguf_name = w.gguf_name;
    out.per_layer = w.per_layer;
    out.dtype = w.type.dtype;
    for (const auto& d : w.type.dims) out.shape.push_back(dim(*d));
    if (w.fallback) out.fallback = *w.fallback;
    out.optional = w.optional;
    out.line = w.range.begin.line;
    m_.weights.push_back(std::move(out));
  }

  // -------------------------------------------------------------- forward
  void lower_forward(const ast::ForwardDecl& fwd) {
    Function& f = m_.forward;
    if (fwd.inputs.size() != 1) error(fwd.range, "forward takes exactly one input, the token ids");
    const ast::InputDecl& in = *fwd.inputs[0];
    std::vector<Dim> shape;
    for (const auto& d : in.type.dims) shape.push_back(dim(*d));
    f.tokens = f.new_value(Type::of(in.type.dtype, shape));
    env_[in.name] = f.tokens;
    {
      std::vector<Dim> result;
      for (const auto& d : fwd.result.dims) result.push_back(dim(*d));
      f.result_type = Type::of(fwd.result.dtype, result);
    }
    block_ = &f.pre;
    for (const auto& s : fwd.body) lower_stmt(*s);
    if (f.result == kNoValue) error(fwd.range, "forward has no return statement");
  }

  void lower_stmt(const ast::Stmt& s) {
    Function& f = m_.forward;
    if (auto* assign = ast::dyn_cast<ast::AssignStmt>(&s)) {
      env_[assign->name] = value(*assign->value);
    } else if (auto* ret = ast::dyn_cast<ast::ReturnStmt>(&s)) {
      f.result = value(*ret->value);
    } else if (auto* loop = ast::dyn_cast<ast::ForStmt>(&s)) {
      lower_loop(*loop);
    }
  }

  void collect_carried(const std::vector<ast::StmtPtr>& body, std::vector<std::string>& names) {
    for (const auto& s : body) {
      auto* assign = ast::dyn_cast<ast::AssignStmt>(s.get());
      if (assign && env_.count(assign->name) &&
          std::find(names.begin(), names.end(), assign->name) == names.end())
        names.push_back(assign->name);
    }
  }

  void lower_loop(const ast::ForStmt& loop) {
    Function& f = m_.forward;
    if (f.loop) error(loop.range, "only one layer loop is supported");
    if (!ast_.layer_weights) error(loop.range, "a layer loop needs a `layer weights` block for its count");
    LayerLoop l;
    l.trip_count = dim(*ast_.layer_weights->count);
    l.line = loop.range.begin.line;
    // Names defined before the loop and reassigned inside it are carried.
    std::vector<std::string> carried;
    collect_carried(loop.body, carried);
    auto outer = env_;
    for (const auto& name : carried) {
      Carried c;
      c.init = env_.at(name);
      c.arg = f.new_value();
      env_[name] = c.arg;
      l.carried.push_back(c);
    }
    f.loop = std::move(l);
    block_ = &f.loop->body;
    for (const auto& s : loop.body) lower_stmt(*s);
    for (size_t i = 0; i < carried.size(); ++i) {
      Carried& c = f.loop->carried[i];
      c.yield = env_.at(carried[i]);
      c.result = f.new_value();
      outer[carried[i]] = c.result;
    }
    env_ = std::move(outer);  // values of the body are not visible after the loop
    block_ = &f.post;
  }

  // A weight operand: `wq[l]` or `tok_embd`; nullopt when `e` is not a weight.
  std::optional<WeightRef> weight_ref(const ast::Expr& e) {
    if (auto* idx = ast::dyn_cast<ast::IndexExpr>(&e)) {
      auto* base = ast::dyn_cast<ast::NameExpr>(idx->base.get());
      if (base) return WeightRef{base->name, true};
    }
    if (auto* name = ast::dyn_cast<ast::NameExpr>(&e);
        name && (name->resolved == ast::NameKind::Weight || name->resolved == ast::NameKind::LayerWeight))
      return WeightRef{name->name, name->resolved == ast::NameKind::LayerWeight};
    return std::nullopt;
  }

  ValueId emit(Op op, const ast::Expr& at) {
    op.result = m_.forward.new_value();
    op.line = at.range.begin.line;
    block_->push_back(std::move(op));
    return block_->back().result;
  }

  const ast::Expr& arg(const ast::CallExpr& c, const char* name) {
    const ast::Expr* e = c.find(name);
    if (!e) error(c.range, std::string("missing argument '") + name + "'");
    return *e;
  }

  // The param a float argument reads: a param name as written, or a
  // constant param made for a literal (`eps_const` = 1e-06), shared by equal
  // literals.
  std::string param_name(const ast::Expr& e, const std::string& what, const std::string& hint) {
    if (auto* name = ast::dyn_cast<ast::NameExpr>(&e); name && name->resolved == ast::NameKind::Param)
      return name->name;
    auto value = number(e);
    if (!value) error(e.range, what + " must be a param or a number");
    return constant_param(*value, hint);
  }

  std::string constant_param(double value, const std::string& hint) {
    for (const auto& p : m_.params)
      if (p.source == Param::Source::Constant && p.default_value == value && p.name.rfind(hint, 0) == 0) return p.name;
    std::string name = hint + "_const";
    for (int i = 2; m_.find_param(name); ++i) name = hint + "_const" + std::to_string(i);
    Param p;
    p.name = name;
    p.kind = Param::Kind::Float;
    p.source = Param::Source::Constant;
    p.default_value = value;
    m_.params.push_back(std::move(p));
    return name;
  }

  // add/mul: the weight operand, if any, goes second (both are commutative).
  ValueId elementwise(OpId kind, const ast::Expr& a, const ast::Expr& b, const ast::Expr& at) {
    Op op;
    op.kind = kind;
    auto wa = weight_ref(a), wb = weight_ref(b);
    if (wa && wb) error(at.range, "cannot combine two weights directly");
    if (wa) {
      op.operands = {value(b)};
      op.weights = {*wa};
    } else if (wb) {
      op.operands = {value(a)};
      op.weights = {*wb};
    } else {
      op.operands = {value(a), value(b)};
    }
    return emit(std::move(op), at);
  }

  // E of `sqrt(E)` with E an integer size expression (the float scalars the
  // IR carries as sizes: sqrt(n_embd)).
  std::optional<Dim> sqrt_of(const ast::Expr& e) {
    auto* call = ast::dyn_cast<ast::CallExpr>(&e);
    if (!call || call->fn != ast::ScalarFn::Sqrt || call->args.size() != 1) return std::nullopt;
    return dim(*call->args[0].value);
  }
  // E of `1 / sqrt(E)`.
  std::optional<Dim> rsqrt_of(const ast::Expr& e) {
    auto* bin = ast::dyn_cast<ast::BinaryExpr>(&e);
    auto one = bin && bin->op == ast::BinaryOp::Div ? number(*bin->lhs) : std::nullopt;
    if (!one || *one != 1.0) return std::nullopt;
    return sqrt_of(*bin->rhs);
  }

  ValueId value(const ast::Expr& e) {
    if (auto* name = ast::dyn_cast<ast::NameExpr>(&e)) {
      auto it = env_.find(name->name);
      if (it == env_.end()) error(e.range, quoted(name->name) + " is not a tensor value here");
      return it->second;
    }
    if (auto* bin = ast::dyn_cast<ast::BinaryExpr>(&e)) {
      if (bin->op == ast::BinaryOp::Add) return elementwise(OpId::Add, *bin->lhs, *bin->rhs, e);
      if (bin->op == ast::BinaryOp::Mul) return elementwise(OpId::Mul, *bin->lhs, *bin->rhs, e);
      error(e.range, quoted(ast::to_string(bin->op)) + " is not a tensor operation");
    }
    auto* call = ast::dyn_cast<ast::CallExpr>(&e);
    if (!call) error(e.range, quoted(ast::to_string(e)) + " is not a tensor expression");
    if (!call->op) error(e.range, quoted(call->callee) + " is not a tensor operation");
    Op op;
    op.kind = *call->op;
    switch (op.kind) {
      case OpId::Embed: {
        auto table = weight_ref(arg(*call, "table"));
        if (!table) error(arg(*call, "table").range, "embed's table must be a weight");
        op.operands = {value(arg(*call, "tokens"))};
        op.weights = {*table};
        break;
      }
      case OpId::RmsNorm: {
        auto w = weight_ref(arg(*call, "weight"));
        if (!w) error(arg(*call, "weight").range, "rms_norm's weight must be a weight");
        op.operands = {value(arg(*call, "x"))};
        op.weights = {*w};
        op.set_attr("eps", Attr::ident(param_name(arg(*call, "eps"), "rms_norm's eps", "eps")));
        if (const ast::Expr* heads = call->find("heads")) op.set_attr("heads", Attr::of_dim(dim(*heads)));
        break;
      }
      case OpId::MatMul: {
        auto w = weight_ref(arg(*call, "w"));
        if (!w) error(arg(*call, "w").range, "matmul's second operand must be a weight");
        op.operands = {value(arg(*call, "x"))};
        op.weights = {*w};
        break;
      }
      case OpId::Add: return elementwise(OpId::Add, arg(*call, "a"), arg(*call, "b"), e);
      case OpId::Mul: return elementwise(OpId::Mul, arg(*call, "a"), arg(*call, "b"), e);
      case OpId::Rope: {
        op.operands = {value(arg(*call, "x"))};
        op.set_attr("heads", Attr::of_dim(dim(arg(*call, "heads"))));
        op.set_attr("dim", Attr::of_dim(dim(arg(*call, "dim"))));
        // The language's default frequency base is 10000.
        const ast::Expr* base = call->find("base");
        op.set_attr("base", Attr::ident(base ? param_name(*base, "rope's base", "rope_base") : constant_param(10000.0, "rope_base")));
        std::string mode = "neox";
        if (const ast::Expr* m = call->find("mode")) {
          auto* name = ast::dyn_cast<ast::NameExpr>(m);
          if (!name) error(m->range, "rope's mode must be neox or normal");
          mode = name->name;
        }
        op.set_attr("mode", Attr::ident(mode));
        if (const ast::Expr* freqs = call->find("freqs")) {
          auto w = weight_ref(*freqs);
          if (!w) error(freqs->range, "rope's freqs must be a weight");
          op.weights = {*w};
        }
        break;
      }
      case OpId::Attention: {
        op.operands = {value(arg(*call, "q")), value(arg(*call, "k")), value(arg(*call, "v"))};
        Dim heads = dim(arg(*call, "heads"));
        const ast::Expr* kv = call->find("kv_heads");
        op.set_attr("heads", Attr::of_dim(heads));
        op.set_attr("kv_heads", Attr::of_dim(kv ? dim(*kv) : heads));
        op.set_attr("dim", Attr::of_dim(dim(arg(*call, "dim"))));
        if (const ast::Expr* scale = call->find("scale")) {
          if (auto d = rsqrt_of(*scale))
            op.set_attr("scale_rsqrt", Attr::of_dim(*d));
          else
            op.set_attr("scale", Attr::ident(param_name(*scale, "attention's scale (a param, a number or 1 / sqrt(size))", "attn_scale")));
        }
        if (const ast::Expr* cap = call->find("softcap"))
          op.set_attr("softcap", Attr::ident(param_name(*cap, "attention's softcap", "softcap")));
        if (const ast::Expr* window = call->find("window")) op.set_attr("window", Attr::of_dim(dim(*window)));
        if (const ast::Expr* pattern = call->find("window_pattern"))
          op.set_attr("window_pattern", Attr::of_dim(dim(*pattern)));
        break;
      }
      case OpId::Scale: {
        op.operands = {value(arg(*call, "x"))};
        const ast::Expr& factor = arg(*call, "factor");
        if (auto d = sqrt_of(factor))
          op.set_attr("factor_sqrt", Attr::of_dim(*d));
        else
          op.set_attr("factor", Attr::ident(param_name(factor, "scale's factor (a param, a number or sqrt(size))", "scale")));
        break;
      }
      default: {
        // An op of activations and scalar attributes (an activation function, a cap):
        // each operand a value, each scalar a param (a number becomes a constant param).
        const ops::OpInfo& info = ops::op_info(op.kind);
        for (const ops::OperandSpec& o : info.operands) op.operands.push_back(value(arg(*call, o.name)));
        for (const ops::AttrSpec& a : info.attrs)
          if (a.kind == ops::AttrKind::Scalar && a.required)
            op.set_attr(a.name, Attr::ident(param_name(arg(*call, a.name), std::string(info.name) + "'s " + a.name, info.name)));
        break;
      }
    }
    return emit(std::move(op), e);
  }

  const ast::Module& ast_;
  DiagnosticEngine& diags_;
  Module m_;
  std::map<std::string, ValueId> env_;
  std::vector<Op>* block_ = nullptr;
};

}  // namespace

std::optional<Module> lower_ast(const dsl::ast::Module& ast, DiagnosticEngine& diags) {
  try {
    return AstLowering(ast, diags).run();
  } catch (const LoweringFailed&) {
    return std::nullopt;
  }
}

}  // namespace lumen::ir
