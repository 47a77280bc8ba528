// Pass plan_memory: one arena for all activations, liveness-based symbolic
// offsets (see passes.h).
//
// Values that must share storage are grouped into one buffer first (a view
// lives in its source, rope rotates in place, a residual matmul accumulates
// into its residual when that is the residual's last use, a loop-carried
// value keeps one buffer across iterations). Each buffer is live from the
// first definition to the last use of any of its values, a value defined
// before the loop and read inside it staying live until the loop ends. The
// buffers are then placed on stacked levels by interval colouring (see
// place()), so that buffers live at the same time never share bytes.
#include <algorithm>
#include <map>
#include <optional>

#include "lumen/passes/passes.h"
#include "pass_util.h"

namespace lumen::passes {

namespace {

using ir::Dim;
using ir::ValueId;

constexpr int64_t kAlign = 64;  // every buffer offset, for any N (cache lines, AVX-512 loads)

// By the type list's blocks (a scalar type's block is one element).
Dim row_bytes(ir::DType dtype, const Dim& cols) {
  const ops::DTypeRow& t = ops::row(dtype);
  Dim blocks = t.block_elems == 1 ? cols : cols / Dim::constant(t.block_elems);
  return blocks * Dim::constant(t.block_bytes);
}

class Planner {
 public:
  explicit Planner(ir::Module& m) : m_(m), f_(m.forward) {}

  void run() {
    number_positions();
    assign_buffers();
    ir::MemoryPlan plan;
    plan.buffers = place();
    plan.arena_bytes = arena_bytes_;
    m_.memory = std::move(plan);
  }

 private:
  // `line`: the DSL line of the op at fault (see ir::IrError).
  [[noreturn]] void fail(const std::string& msg, int line) { throw ir::IrError("plan_memory: " + msg, line); }

  // ------------------------------------------------------------ liveness
  // Positions: the tokens argument 0, then one per op; the loop header and
  // the yield get one each.
  void number_positions() {
    int pos = 0;
    def_[f_.tokens] = pos++;
    const ir::Op* previous = nullptr;
    auto visit = [&](const ir::Op& op) {
      for (ValueId v : ir::op_inputs(op)) use(v, pos, op.line);
      // The runtime may quantize a matmul's or attention's output inside the
      // producer's tasks (docs/runtime.md, "Row runs and folded quantizes"):
      // such a Quantize's result is born with its operand, so that it never
      // shares bytes with what the producer reads.
      if (op.kind == ops::OpId::Quantize && previous != nullptr && op.operands.size() == 1 &&
          op.operands[0] == previous->result &&
          (previous->kind == ops::OpId::MatMul || previous->kind == ops::OpId::Attention))
        born_[op.result] = pos - 1;
      def_[op.result] = pos++;
      previous = &op;
    };
    for (const auto& op : f_.pre) visit(op);
    if (f_.loop) {
      loop_begin_ = pos;
      for (const auto& c : f_.loop->carried) {
        use(c.init, pos, f_.loop->line);
        def_[c.arg] = pos;
      }
      ++pos;
      for (const auto& op : f_.loop->body) visit(op);
      loop_end_ = pos;
      for (const auto& c : f_.loop->carried) {
        use(c.yield, pos, f_.loop->line);
        def_[c.result] = pos;
      }
      ++pos;
    }
    for (const auto& op : f_.post) visit(op);
    use(f_.result, pos, 0);  // the runtime reads the logits after the last op
  }

  // `line`: the DSL line of the reader, kept for the last one.
  void use(ValueId v, int pos, int line) {
    // A value from before the loop read inside it is read in every iteration.
    if (f_.loop && def_.count(v) && def_[v] < loop_begin_ && pos > loop_begin_ && pos <= loop_end_) pos = loop_end_;
    int& last = last_use_[v];
    if (pos >= last) last_reader_line_[v] = line;
    last = std::max({last, pos, def_.count(v) ? def_[v] : 0});
  }
  int last_use(ValueId v) const {
    auto it = last_use_.find(v);
    return it == last_use_.end() ? def_.at(v) : it->second;
  }
  // The DSL line of the op that computes `v` in the loop body, else the loop's.
  int line_of(ValueId v) const {
    for (const auto& op : f_.loop->body)
      if (op.result == v && op.line > 0) return op.line;
    return f_.loop->line;
  }

  // --------------------------------------------------------- buffer sharing
  struct Slot {
    int buffer = -1;
    Dim col_offset;
  };

  int new_buffer(ValueId v) {
    const ir::Type& t = f_.type(v);
    // infer_shapes typed every value and the verifier required it.
    LUMEN_ASSERT(t.known && !t.shape.empty() && t.shape.size() <= 2, "plan_memory: value without a matrix type");
    ir::ArenaBuffer b;
    b.dtype = t.dtype;
    b.rows = t.shape[0];
    b.cols = t.shape.size() == 2 ? t.shape[1] : Dim::constant(1);
    b.bytes = ops::align_up(b.rows * row_bytes(b.dtype, b.cols), kAlign);
    buffers_.push_back(std::move(b));
    return static_cast<int>(buffers_.size() - 1);
  }

  void place_value(ValueId v, Slot slot) {
    slots_[v] = slot;
    buffers_[static_cast<size_t>(slot.buffer)].values.push_back(v);
  }

  void assign_op(const ir::Op& op) {
    ValueId r = op.result;
    switch (op.kind) {
      case ops::OpId::View: {
        Slot s = slots_.at(op.operands.at(0));
        s.col_offset = s.col_offset + op.attr("offset")->dim;
        place_value(r, s);
        return;
      }
      case ops::OpId::Rope:  // rotates in place: its input must be dead afterwards
        if (last_use(op.operands.at(0)) > def_.at(r)) fail("rope's input is read after the rotation", op.line);
        place_value(r, slots_.at(op.operands.at(0)));
        return;
      case ops::OpId::MatMul:
        // Accumulate into the residual when nothing reads it afterwards.
        if (op.residual != ir::kNoValue && last_use(op.residual) == def_.at(r)) {
          place_value(r, slots_.at(op.residual));
          return;
        }
        break;
      default: break;
    }
    if (auto slot = carried_slot(op)) {
      place_value(r, *slot);
      return;
    }
    place_value(r, Slot{new_buffer(r), Dim::constant(0)});
  }

  // An elementwise op in the layer loop writes its result in place of a
  // carried value of the same type when everything stored there is dead by
  // then (or is read by this op at the same column): the carried value then
  // keeps one buffer across iterations whatever op updates it (`x = x * y`,
  // not only a residual matmul), with no copy.
  std::optional<Slot> carried_slot(const ir::Op& op) const {
    if (!f_.loop) return std::nullopt;
    switch (op.kind) {
      case ops::OpId::Add:
      case ops::OpId::Mul:
      case ops::OpId::Silu:
      case ops::OpId::SiluMul: break;
      default: return std::nullopt;
    }
    const int at = def_.at(op.result);
    if (at <= loop_begin_ || at >= loop_end_) return std::nullopt;
    for (const auto& c : f_.loop->carried) {
      if (!(f_.type(c.arg) == f_.type(op.result))) continue;
      const Slot& target = slots_.at(c.arg);
      bool free = true;
      for (ValueId v : buffers_[static_cast<size_t>(target.buffer)].values) {
        if (last_use(v) < at) continue;
        free = free && last_use(v) == at &&
               std::find(op.operands.begin(), op.operands.end(), v) != op.operands.end() &&
               slots_.at(v).col_offset == target.col_offset;
      }
      if (free) return target;
    }
    return std::nullopt;
  }

  void assign_buffers() {
    place_value(f_.tokens, Slot{new_buffer(f_.tokens), Dim::constant(0)});
    for (const auto& op : f_.pre) assign_op(op);
    if (f_.loop) {
      for (const auto& c : f_.loop->carried) {
        if (last_use(c.init) > loop_begin_)
          fail("a loop's initial value is read after the loop starts",
               last_reader_line_.at(c.init) > 0 ? last_reader_line_.at(c.init) : f_.loop->line);
        place_value(c.arg, slots_.at(c.init));
      }
      for (const auto& op : f_.loop->body) assign_op(op);
      for (const auto& c : f_.loop->carried) {
        const Slot& a = slots_.at(c.arg);
        const Slot& y = slots_.at(c.yield);
        if (a.buffer != y.buffer || !(a.col_offset == y.col_offset))
          fail("the layer loop yields a value that is not computed in place of the carried one", line_of(c.yield));
        place_value(c.result, a);
      }
    }
    for (const auto& op : f_.post) assign_op(op);
  }

  // ------------------------------------------------------------- placement
  std::vector<ir::ArenaBuffer> place() {
    struct Interval {
      int begin = 0, end = 0;
    };
    std::vector<Interval> live(buffers_.size());
    for (size_t i = 0; i < buffers_.size(); ++i) {
      live[i].begin = INT32_MAX;
      for (ValueId v : buffers_[i].values) {
        const auto early = born_.find(v);
        live[i].begin = std::min(live[i].begin, early != born_.end() ? early->second : def_.at(v));
        live[i].end = std::max(live[i].end, last_use(v));
      }
    }
    std::vector<size_t> order(buffers_.size());
    for (size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return live[a].begin < live[b].begin; });
    // Interval-graph colouring: each buffer joins a free level (one whose
    // buffers all died before it starts), preferring a level that already
    // holds a buffer of the same size, else a new level. A level is as high
    // as its largest buffer; levels are stacked. Buffers live at the same
    // time are on different levels, so they never overlap, and the arena is
    // the sum of the level heights (max() over symbolic sizes).
    struct Level {
      std::vector<size_t> members;
      int end = -1;  // last position any member is live
    };
    std::vector<Level> levels;
    std::vector<size_t> level_of(buffers_.size());
    for (size_t i : order) {
      int chosen = -1;
      for (size_t k = 0; k < levels.size(); ++k) {
        if (levels[k].end >= live[i].begin) continue;  // still occupied
        bool same_size = false;
        for (size_t j : levels[k].members) same_size |= buffers_[j].bytes == buffers_[i].bytes;
        if (chosen < 0 || same_size) chosen = static_cast<int>(k);
        if (same_size) break;
      }
      if (chosen < 0) {
        chosen = static_cast<int>(levels.size());
        levels.emplace_back();
      }
      Level& level = levels[static_cast<size_t>(chosen)];
      level.members.push_back(i);
      level.end = std::max(level.end, live[i].end);
      level_of[i] = static_cast<size_t>(chosen);
    }
    Dim base = Dim::constant(0);
    std::vector<Dim> level_offset;
    for (const auto& level : levels) {
      level_offset.push_back(base);
      std::optional<Dim> height;
      std::vector<Dim> sizes;  // distinct member sizes, in order
      for (size_t j : level.members)
        if (std::find(sizes.begin(), sizes.end(), buffers_[j].bytes) == sizes.end()) sizes.push_back(buffers_[j].bytes);
      for (const Dim& size : sizes) height = height ? ops::max(*height, size) : size;
      base = base + *height;
    }
    for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].offset = level_offset[level_of[i]];
    arena_bytes_ = base;
    // Printed in order of first definition.
    std::vector<ir::ArenaBuffer> out;
    for (size_t i : order) out.push_back(buffers_[i]);
    return out;
  }

  ir::Module& m_;
  ir::Function& f_;
  std::map<ValueId, int> def_, last_use_, last_reader_line_;
  std::map<ValueId, int> born_;  // values live from before their definition (number_positions)
  int loop_begin_ = -1, loop_end_ = -1;
  std::map<ValueId, Slot> slots_;
  std::vector<ir::ArenaBuffer> buffers_;
  Dim arena_bytes_;
};

}  // namespace

void plan_memory(ir::Module& m) { Planner(m).run(); }

}  // namespace lumen::passes
