// Binding a compiled program to a GGUF file (see binding.h): hparams, checks,
// architecture, weights by name with dtype and shape checks, and the one-time
// repacking of matmul weights into the kernels' row-group formats (a weight
// of a type without a packed format of its own converted to Q8_0 first).
#include "lumen/runtime/binding.h"
#include "lumen/ops/op_list.h"
#include "lumen/common/cache.h"
#include "lumen/quant/quant.h"
#include "lumen/target/page_buffer.h"
#include "lumen/target/weight_formats.h"

#include "lumen/runtime/pack_cache.h"
#include "lumen/runtime/thread_pool.h"
#include "lumen/runtime/weight_types_check.h"

#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>
#include <string>

namespace lumen::runtime {
namespace {

using program::DType;
using program::Epilogue;
using program::Dim;
using program::HParam;
using ::lumen::ops::OpId;
using program::Program;

std::string format_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string shape_string(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s.append(i ? ", " : "").append(std::to_string(ne[i]));
  return s + "]";
}

// The value of one hparam's GGUF key, with its type checked exactly.
std::optional<double> read_key(const HParam& h, const gguf::File& file) {
  const std::string& key = h.gguf_key;
  if (key.size() > 5 && key.compare(0, 4, "len(") == 0 && key.back() == ')') {
    std::string array_key = key.substr(4, key.size() - 5);
    const gguf::KeyValue* kv = file.find(array_key);
    if (kv == nullptr) return std::nullopt;
    if (kv->value.type != gguf::ValueType::Array)
      throw LoadError("metadata key '" + array_key + "' has type " + std::string(gguf::to_string(kv->value.type)) +
                      ", expected an array (for hparam '" + h.name + "')");
    return static_cast<double>(kv->value.array().items.size());
  }
  const gguf::KeyValue* kv = file.find(key);
  if (kv == nullptr) return std::nullopt;
  const gguf::Scalar* scalar = kv->value.type == gguf::ValueType::Array ? nullptr : &kv->value.scalar();
  if (h.kind == HParam::Kind::Int) {
    if (scalar == nullptr || kv->value.type != gguf::ValueType::U32)
      throw LoadError("metadata key '" + key + "' has type " + std::string(gguf::to_string(kv->value.type)) +
                      ", expected u32");
    return static_cast<double>(std::get<uint32_t>(*scalar));
  }
  if (scalar == nullptr || kv->value.type != gguf::ValueType::F32)
    throw LoadError("metadata key '" + key + "' has type " + std::string(gguf::to_string(kv->value.type)) +
                    ", expected f32");
  return static_cast<double>(std::get<float>(*scalar));
}

std::string substitute_layer(const std::string& pattern, int64_t layer) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern.compare(i, 3, "{i}") == 0) {
      out += std::to_string(layer);
      i += 2;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

int64_t eval_or_throw(const Dim& e, const program::HParamValues& hp, const std::string& what) {
  try {
    return hp.eval(e, 1);
  } catch (const lumen::ops::DimError& err) {
    throw LoadError("cannot evaluate " + what + ": " + err.what());
  }
}

// ne with trailing 1s removed, so [128] and [128, 1] compare equal.
std::vector<int64_t> squeeze(std::vector<int64_t> ne) {
  while (ne.size() > 1 && ne.back() == 1) ne.pop_back();
  return ne;
}

int64_t round_up(int64_t v, int64_t m) { return (v + m - 1) / m * m; }

// Refuses a tensor whose file type Lumen does not run at all, by name: the
// importance-matrix and ternary types, and anything that is no weight type
// of the list. Types of the list that are not the declared one get the
// binding's "expected" message instead.
std::string type_head(const gguf::TensorInfo& t) {
  return "tensor '" + t.name + "' has type " + std::string(gguf::to_string(t.type));
}

// The types no kernel of Lumen's reads, whatever the program: checked over
// the whole file first, so that their message wins over "compiled for"
// (a type of the list that is no weight type, I32, is refused per use below).
void refuse_unrunnable_file_types(const gguf::File& file) {
  using T = gguf::TensorType;
  for (const gguf::TensorInfo& t : file.tensors()) {
    switch (t.type) {
      case T::IQ1_S: case T::IQ1_M: case T::IQ2_XXS: case T::IQ2_XS: case T::IQ2_S: case T::IQ3_XXS: case T::IQ3_S:
        throw LoadError(type_head(t) + ", which Lumen does not run (an importance-matrix type)");
      case T::TQ1_0: case T::TQ2_0:
        throw LoadError(type_head(t) + ", which Lumen does not run (a ternary type)");
      default:
        if (!::lumen::ops::dtype_of_ggml(static_cast<uint32_t>(t.type)))  // Q8_1, Q8_K, I8, ...
          throw LoadError(type_head(t) + ", which is not a weight type Lumen runs");
    }
  }
}

void refuse_unrunnable_type(const gguf::TensorInfo& t) {
  const std::string head = type_head(t);
  const std::optional<DType> dt = ::lumen::ops::dtype_of_ggml(static_cast<uint32_t>(t.type));
  if (!dt || !::lumen::ops::row(*dt).weight)
    throw LoadError(head + ", which is not a weight type Lumen runs");
}

DType dtype_of(const gguf::TensorInfo& t) {
  // bind_weights accepted only types of the list.
  return *::lumen::ops::dtype_of_ggml(static_cast<uint32_t>(t.type));
}

// The first row of [row0, row0 + rows) of a quantized tensor with a NaN or
// infinite scale, as "tensor 'X', row R, block B: scale d is NaN".
std::optional<std::string> check_rows(const gguf::TensorInfo& t, int64_t row0, int64_t rows) {
  const DType type = dtype_of(t);
  const int64_t k = t.ne[0], bytes = ::lumen::ops::row_bytes(type, k);
  for (int64_t r = row0; r < row0 + rows; ++r)
    if (std::optional<std::string> why = quant::check_row(type, t.data + r * bytes, k))
      return "tensor '" + t.name + "', row " + std::to_string(r) + ", " + *why;
  return std::nullopt;
}

}  // namespace

std::vector<double> resolve_hparams(const Program& program, const gguf::File& file) {
  try {
    std::optional<std::string> arch = file.get_string("general.architecture");
    if (!arch) throw LoadError("the GGUF file has no general.architecture key");
    if (*arch != program.arch)
      throw LoadError("the GGUF file is a '" + *arch + "' model, but this model.so runs '" + program.arch + "'");

    // Unresolved entries are NaN, so a derivation that looks ahead fails to evaluate.
    std::vector<double> values(program.hparams.size(), std::nan(""));
    const program::HParamValues resolved(program.hparams, values);
    for (size_t i = 0; i < program.hparams.size(); ++i) {
      const HParam& h = program.hparams[i];
      std::optional<double> v;
      std::string source = h.gguf_key.empty() ? "derived" : "key " + h.gguf_key;
      if (!h.gguf_key.empty()) v = read_key(h, file);
      if (!v && h.derived) {
        v = static_cast<double>(eval_or_throw(*h.derived, resolved, "hparam '" + h.name + "'"));
        source = "derived";
      }
      if (!v && h.default_value) {
        v = *h.default_value;
        source = "default";
      }
      if (!v) {
        if (h.gguf_key.empty()) throw LoadError("hparam '" + h.name + "' has no key, default or derivation");
        throw LoadError("missing metadata key '" + h.gguf_key + "' (hparam '" + h.name + "')");
      }
      if (!std::isfinite(*v) || (h.min_value && *v < *h.min_value) || (h.max_value && *v > *h.max_value)) {
        throw LoadError("hparam '" + h.name + "' = " + format_number(*v) + " (" + source + ") is out of range [" +
                        (h.min_value ? format_number(*h.min_value) : "-inf") + ", " +
                        (h.max_value ? format_number(*h.max_value) : "inf") + "]");
      }
      values[i] = *v;
    }
    for (const program::Check& c : program.checks) {
      int64_t lhs = eval_or_throw(c.lhs, resolved, "check '" + c.message + "'");
      int64_t rhs = eval_or_throw(c.rhs, resolved, "check '" + c.message + "'");
      bool ok = false;
      switch (c.cmp) {
        case program::Check::Cmp::Eq: ok = lhs == rhs; break;
        case program::Check::Cmp::Ne: ok = lhs != rhs; break;
        case program::Check::Cmp::Lt: ok = lhs < rhs; break;
        case program::Check::Cmp::Le: ok = lhs <= rhs; break;
        case program::Check::Cmp::Gt: ok = lhs > rhs; break;
        case program::Check::Cmp::Ge: ok = lhs >= rhs; break;
      }
      if (!ok)
        throw LoadError("model check failed: " + c.message + " (" + std::to_string(lhs) + " vs " +
                        std::to_string(rhs) + ")");
    }
    return values;
  } catch (const gguf::Error& e) {
    throw LoadError(e.what());
  }
}

namespace {

using program::Section;

int64_t layers_of(const BoundModel& b, Section s) { return s == Section::Layer ? b.n_layers : 1; }

// The program-level sizes from the resolved hparams.
void bind_sizes(const Program& p, BoundModel& b) {
  const program::HParamValues hp(p.hparams, b.hparams);
  b.n_layers = eval_or_throw(p.n_layers, hp, "the layer count");
  if (b.n_layers < 0 || b.n_layers > 65536)
    throw LoadError("layer count " + std::to_string(b.n_layers) + " out of range");
  b.n_ctx_train = eval_or_throw(p.n_ctx_train, hp, "the training context");
  b.kv_dim = eval_or_throw(p.kv_dim, hp, "the KV row width");
}

// Every weight by name (or its fallback), per layer, with dtype and shape checked.
void bind_weights(const Program& p, const gguf::File& file, BoundModel& b) {
  b.tensors.resize(p.weights.size());
  const program::HParamValues hp(p.hparams, b.hparams);
  for (size_t wi = 0; wi < p.weights.size(); ++wi) {
    const program::Weight& w = p.weights[wi];
    int64_t count = w.per_layer ? b.n_layers : 1;
    std::vector<int64_t> expected;
    for (const Dim& e : w.shape) expected.push_back(eval_or_throw(e, hp, "the shape of '" + w.name + "'"));
    for (int64_t layer = 0; layer < count; ++layer) {
      std::string name = substitute_layer(w.gguf_name, layer);
      const gguf::TensorInfo* t = file.find_tensor(name);
      if (t == nullptr && !w.fallback.empty()) t = file.find_tensor(substitute_layer(w.fallback, layer));
      if (t == nullptr && w.optional) {
        b.tensors[wi].push_back(nullptr);
        continue;
      }
      if (t == nullptr) throw LoadError("missing tensor '" + name + "' (weight '" + w.name + "')");
      refuse_unrunnable_type(*t);
      std::optional<DType> dt = ::lumen::ops::dtype_of_ggml(static_cast<uint32_t>(t->type));
      bool accepted = false;
      for (DType d : w.dtypes) accepted |= dt && *dt == d;
      if (!accepted) {
        std::string want;
        for (DType d : w.dtypes) want.append(want.empty() ? "" : " or ").append(::lumen::ops::id_name(d));
        throw LoadError("tensor '" + t->name + "' has type " + std::string(gguf::to_string(t->type)) +
                        ", expected " + want);
      }
      if (squeeze(t->ne) != squeeze(expected))
        throw LoadError("tensor '" + t->name + "' has shape " + shape_string(t->ne) + ", expected " +
                        shape_string(expected));
      b.tensors[wi].push_back(t);
    }
  }
}

// The activations a MatMul op reads: its weights' packed format follows
// from it (target/weight_formats.h packed_format).
DType matmul_input(const Program& p, const program::Op& op) {
  if (op.inputs.empty() || op.inputs[0].buffer < 0 || op.inputs[0].buffer >= static_cast<int>(p.buffers.size()))
    throw LoadError("a MatMul op has no input buffer");
  return p.buffers[static_cast<size_t>(op.inputs[0].buffer)].dtype;
}

// One matmul of one layer to pack: where its packed rows go in the one mapping.
struct PackJob {
  Section section;
  size_t op;
  int64_t layer;
  int64_t offset;  // bytes into the packed storage
};

struct PackPlan {
  std::vector<PackJob> jobs;
  int64_t total_bytes = 0;
  std::set<const gguf::TensorInfo*> kept;    // tensors read in place by non-matmul ops
  std::set<const gguf::TensorInfo*> packed;  // tensors of matmul weights (a tied embedding is both)
};

// The rows, row length and biases of one MatMul op of one layer, checked;
// returns its packed size in bytes.
int64_t bind_matmul(const CompiledModel& model, const program::Op& op, int64_t layer, BoundModel& b,
                    PackedMatMul& mm) {
  const Program& p = model.program;
  if (op.weights.empty()) throw LoadError("a MatMul op has no weights");
  int64_t rows_total = 0;
  for (int wi : op.weights) {
    const gguf::TensorInfo* t = b.tensor(wi, layer);
    if (t == nullptr) throw LoadError("matmul weight '" + p.weights[static_cast<size_t>(wi)].name + "' is absent");
    std::vector<int64_t> ne = squeeze(t->ne);
    if (ne.size() > 2) throw LoadError("matmul weight '" + t->name + "' must be a 2-D tensor");
    // Every packed format is in blocks of 32 (a k-quant type's rows are whole 256-blocks).
    if (ne[0] % kQ8Block != 0)
      throw LoadError("matmul weight '" + t->name + "' has rows of " + std::to_string(ne[0]) +
                      " elements, not a multiple of " + std::to_string(kQ8Block));
    // The schedule gave the weights of one matmul one format (passes/schedule.cpp).
    const DType format = packed_format(dtype_of(*t), model.isa, matmul_input(p, op));
    if (wi != op.weights.front() && format != mm.format)
      throw LoadError("matmul weight '" + t->name + "' is packed as " + ::lumen::ops::id_name(format) +
                      ", the others of its matmul as " + ::lumen::ops::id_name(mm.format));
    mm.format = format;
    int64_t rows = ne.size() == 2 ? ne[1] : 1;
    if (mm.k == 0) mm.k = ne[0];
    if (ne[0] != mm.k) throw LoadError("matmul weights of '" + t->name + "' disagree on the row length");
    if (op.epilogue == Epilogue::SiluMul && mm.rows != 0 && rows != mm.rows)
      throw LoadError("gate and up weights differ in rows at '" + t->name + "'");
    rows_total += rows;
    mm.rows = op.epilogue == Epilogue::SiluMul ? rows : rows_total;
  }
  const int64_t group_rows = pack_row_group(model.isa);
  const int64_t mult = op.epilogue == Epilogue::SiluMul ? 2 : 1;
  if (op.epilogue == Epilogue::SiluMul && op.weights.size() != 2)
    throw LoadError("a SiluMul matmul needs exactly two weights (gate, up)");
  const int64_t bytes = mult * packed_bytes(mm.format, mm.rows, mm.k);
  mm.group_bytes = mult * packed_bytes(mm.format, group_rows, mm.k);
  bool wants_bias = op.epilogue == Epilogue::Bias || op.epilogue == Epilogue::BiasResidual;
  if (wants_bias != !op.biases.empty() || (wants_bias && op.biases.size() != op.weights.size()))
    throw LoadError("a MatMul op's biases do not match its weights and epilogue");
  if (wants_bias) {
    std::vector<float>& bias = b.bias_storage.emplace_back();
    for (size_t i = 0; i < op.biases.size(); ++i) {
      int bi = op.biases[i];
      if (bi < 0 || bi >= static_cast<int>(p.weights.size())) throw LoadError("a bias index is out of range");
      const gguf::TensorInfo* bt = b.tensor(bi, layer);
      const gguf::TensorInfo* wt = b.tensor(op.weights[i], layer);
      int64_t rows = squeeze(wt->ne).size() == 2 ? wt->ne[1] : 1;
      if (bt == nullptr) throw LoadError("the bias for '" + wt->name + "' is absent");
      if (bt->type != gguf::TensorType::F32 || static_cast<int64_t>(bt->n_elements) != rows)
        throw LoadError("bias for '" + wt->name + "' must be F32 with " + std::to_string(rows) + " elements");
      const float* src = reinterpret_cast<const float*>(bt->data);
      bias.insert(bias.end(), src, src + rows);
    }
    mm.bias = bias.data();
  }
  return bytes;
}

// Every MatMul of every section and layer: checked, sized, placed.
PackPlan plan_packing(const CompiledModel& model, BoundModel& b) {
  const Program& p = model.program;
  PackPlan plan;
  for (Section s : program::kSections) {
    const std::vector<program::Op>& ops = p.ops(s);
    b.matmuls[s].resize(ops.size());
    for (size_t oi = 0; oi < ops.size(); ++oi) {
      const program::Op& op = ops[oi];
      for (int wi : op.weights)
        if (wi < 0 || wi >= static_cast<int>(p.weights.size()))
          throw LoadError("op " + std::string(::lumen::ops::id_name(op.kind)) + " refers to a weight out of range");
      for (int64_t layer = 0; layer < layers_of(b, s); ++layer) {
        if (op.kind != OpId::MatMul) {
          for (int wi : op.weights) plan.kept.insert(b.tensor(wi, layer));
          continue;
        }
        PackedMatMul mm;
        const int64_t bytes = bind_matmul(model, op, layer, b, mm);
        b.matmuls[s][oi].push_back(mm);
        for (int wi : op.weights) plan.packed.insert(b.tensor(wi, layer));
        plan.jobs.push_back(PackJob{s, oi, layer, plan.total_bytes});
        plan.total_bytes += round_up(bytes, 64);
      }
    }
  }
  return plan;
}

// Unmaps the file's pages wholly inside [byte0, byte0 + bytes) of a tensor
// from this process. The mapping is private and read-only, so a reader
// faults a dropped page back in from the page cache: safe for any tensor,
// and what keeps a load from holding the GGUF's pages beside the packed copy.
void drop_file_pages(bool release_file_pages, const gguf::TensorInfo* t, int64_t byte0, int64_t bytes) {
  if (!release_file_pages) return;
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  uintptr_t begin = (reinterpret_cast<uintptr_t>(t->data + byte0) + page - 1) / page * page;
  uintptr_t end = reinterpret_cast<uintptr_t>(t->data + byte0 + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

// Drops the file pages of [byte0, byte0 + bytes) of a tensor once its rows
// are packed, unless a non-matmul op reads the tensor in place.
void release_pages(const PackPlan& plan, bool release_file_pages, const gguf::TensorInfo* t, int64_t byte0,
                   int64_t bytes) {
  if (plan.kept.count(t) == 0) drop_file_pages(release_file_pages, t, byte0, bytes);
}

// Drops the file pages of every weight of the plan once the load has read
// them: the tables non-matmul ops read in place (an embedding lookup faults
// back only its rows), and at the end of a load what reading their
// neighbours faulted around them and the pages release_pages left (those
// straddling two pieces, and a tied head's).
void drop_weight_pages(const PackPlan& plan, bool release_file_pages) {
  for (const std::set<const gguf::TensorInfo*>* tensors : {&plan.kept, &plan.packed})
    for (const gguf::TensorInfo* t : *tensors)
      if (t != nullptr) drop_file_pages(release_file_pages, t, 0, static_cast<int64_t>(t->n_bytes));
}

// The packed bytes are a function of the target's format, the plan (which
// tensors, in which order, at which offsets), the tensors' types and packed
// formats and their contents. Bump kPackLayoutVersion whenever pack_rows,
// the conversion to Q8_0 or the plan changes its output (2: weights of every
// type; 3: Q4_0, Q5_0, Q4_K, Q5_K and Q6_K in their own formats, IQ4_NL
// converted exactly; 4: Q4_1, Q5_1 and IQ4_NL in their own formats; 5: F16,
// BF16 and F32 in their own formats; 6: Q3_K in its own format; 7: Q2_K in its own format).
constexpr int kPackLayoutVersion = 7;

// Each tensor's pages are dropped once it is hashed (drop_file_pages): a
// hit then never holds the GGUF's weights beside the cache's, and a miss
// faults each piece back in as it packs it.
PackCacheKey pack_cache_key(const CompiledModel& model, const PackPlan& plan, const BoundModel& b,
                            bool release_file_pages, ThreadPool& pool) {
  const Program& p = model.program;
  std::string desc = "lumen packed weights " + std::to_string(kPackLayoutVersion) + " " + model.target + " " +
                     std::to_string(kPackedBlockBytes) + " " + std::to_string(plan.total_bytes) + "\n";
  for (const PackJob& job : plan.jobs) {
    const program::Op& op = p.ops(job.section)[job.op];
    desc += std::to_string(static_cast<int>(job.section)) + " " + std::to_string(job.op) + " " +
            std::to_string(job.layer) + " " + std::to_string(job.offset) + " " +
            std::to_string(static_cast<int>(op.epilogue));
    for (int wi : op.weights) {
      const gguf::TensorInfo* t = b.tensor(wi, job.layer);
      desc += " " + t->name + ":" + std::string(gguf::to_string(t->type)) + ":" +
              to_string(packed_format(dtype_of(*t), model.isa, matmul_input(p, op))) + ":" + std::to_string(t->n_bytes) + ":" +
              std::to_string(hash_parallel(t->data, t->n_bytes, 0, pool));
      drop_file_pages(release_file_pages, t, 0, static_cast<int64_t>(t->n_bytes));
    }
    desc += "\n";
  }
  return PackCacheKey{hash_bytes(desc.data(), desc.size(), 1), hash_bytes(desc.data(), desc.size(), 2)};
}

// Rows [row0, row0 + rows) of a matmul weight as GGUF blocks of its packed
// format `format` (k elements a row): in place when that is the tensor's type,
// else (format Q8_0) converted into `buffer`: exactly where
// convert_row_to_q8_0 can, else dequantized and requantized with
// ggml's reference quantizer.
const void* format_rows(DType format, const gguf::TensorInfo& t, int64_t row0, int64_t rows, int64_t k,
                        std::vector<BlockQ8_0>& buffer) {
  const DType type = dtype_of(t);
  const int64_t src_bytes = ::lumen::ops::row_bytes(type, k);
  if (type == format) return t.data + row0 * src_bytes;
  if (format != DType::Q8_0)
    throw LoadError("tensor '" + t.name + "' of type " + ::lumen::ops::id_name(type) + " cannot be packed as " +
                    ::lumen::ops::id_name(format));
  const int64_t row_blocks = k / kQ8Block;
  buffer.resize(static_cast<size_t>(rows * row_blocks));
  std::vector<float> values(static_cast<size_t>(k));
  for (int64_t r = 0; r < rows; ++r) {
    const uint8_t* src = t.data + (row0 + r) * src_bytes;
    BlockQ8_0* out = buffer.data() + r * row_blocks;
    if (converts_exactly_to_q8_0(type)) {
      convert_row_to_q8_0(type, src, out, k);
      continue;
    }
    quant::dequantize_row(type, src, values.data(), k);
    quantize_row_q8_0_ref(values.data(), out, static_cast<size_t>(k));
  }
  return buffer.data();
}

// Checks the scales of every quantized tensor that only non-matmul ops read
// (an untied embedding table), on every load. pack_weights checks the rows
// of the others as it packs them; a pack cache hit stands for that check.
void check_kept_tensors(const PackPlan& plan, ThreadPool& pool) {
  constexpr int64_t kCheckRows = 1024;
  struct Piece {
    const gguf::TensorInfo* t;
    int64_t row0, rows;
  };
  std::vector<Piece> pieces;
  for (const gguf::TensorInfo* t : plan.kept) {
    if (t == nullptr || plan.packed.count(t) != 0 || ::lumen::ops::row(dtype_of(*t)).block_elems == 1) continue;
    const int64_t rows = static_cast<int64_t>(t->n_elements) / t->ne[0];
    for (int64_t r = 0; r < rows; r += kCheckRows) pieces.push_back(Piece{t, r, std::min(kCheckRows, rows - r)});
  }
  std::vector<std::optional<std::string>> problems(pieces.size());
  pool.parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t i, int) {
    const Piece& p = pieces[static_cast<size_t>(i)];
    problems[static_cast<size_t>(i)] = check_rows(*p.t, p.row0, p.rows);
  });
  for (const std::optional<std::string>& why : problems)
    if (why) throw LoadError(*why);
}

// Points every packed matmul at its bytes in `storage`.
void place_packed(const PackPlan& plan, uint8_t* storage, BoundModel& b) {
  for (const PackJob& job : plan.jobs)
    b.matmuls[job.section][job.op][static_cast<size_t>(job.layer)].w = storage + job.offset;
}

// Repacks every planned matmul into `storage`, in parallel pieces, after
// checking each piece's scales (so a pack cache file, written only after
// this returns, holds only checked weights; its key hashes their bytes).
void pack_weights(const CompiledModel& model, const PackPlan& plan, bool release_file_pages, ThreadPool& pool,
                  uint8_t* storage, BoundModel& b) {
  const Program& p = model.program;
  const int64_t group_rows = pack_row_group(model.isa);

  // Pieces of at most kPieceRows rows, packed in parallel; the file pages of
  // each piece are released right after it is packed (unless a non-matmul op
  // reads the tensor in place), so peak memory stays about one model's size.
  constexpr int64_t kPieceRows = 1024;  // a multiple of every ISA's row group
  struct Piece {
    const PackJob* job;
    int weight;        // -1: the whole job through one contiguous copy
    int64_t row0, rows;
  };
  std::vector<Piece> pieces;
  auto tensor_for = [&](const PackJob& job, int wi) { return b.tensor(wi, job.layer); };
  for (const PackJob& job : plan.jobs) {
    const program::Op& op = p.ops(job.section)[job.op];
    PackedMatMul& mm = b.matmuls[job.section][job.op][static_cast<size_t>(job.layer)];
    bool aligned = true;
    for (size_t i = 0; i + 1 < op.weights.size(); ++i)
      aligned &= static_cast<int64_t>(tensor_for(job, op.weights[i])->n_elements) / mm.k % group_rows == 0;
    if (!aligned) {
      pieces.push_back(Piece{&job, -1, 0, mm.rows});
      continue;
    }
    const size_t n_weights = op.epilogue == Epilogue::SiluMul ? 1 : op.weights.size();
    for (size_t i = 0; i < n_weights; ++i) {
      const int64_t rows = static_cast<int64_t>(tensor_for(job, op.weights[i])->n_elements) / mm.k;
      for (int64_t r = 0; r < rows; r += kPieceRows)
        pieces.push_back(Piece{&job, static_cast<int>(i), r, std::min(kPieceRows, rows - r)});
    }
  }
  auto release = [&](const gguf::TensorInfo* t, int64_t byte0, int64_t bytes) {
    release_pages(plan, release_file_pages, t, byte0, bytes);
  };
  auto rows_of = [](const gguf::TensorInfo* t) { return static_cast<int64_t>(t->n_elements) / t->ne[0]; };
  auto src_row_bytes = [](const gguf::TensorInfo* t) { return ::lumen::ops::row_bytes(dtype_of(*t), t->ne[0]); };
  auto check = [](const gguf::TensorInfo* t, int64_t row0, int64_t rows) { return check_rows(*t, row0, rows); };
  std::vector<std::optional<std::string>> problems(pieces.size());
  pool.parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t index, int) {
    const Piece& piece = pieces[static_cast<size_t>(index)];
    std::optional<std::string>& problem = problems[static_cast<size_t>(index)];
    const PackJob& job = *piece.job;
    const program::Op& op = p.ops(job.section)[job.op];
    const PackedMatMul& mm = b.matmuls[job.section][job.op][static_cast<size_t>(job.layer)];
    uint8_t* out = storage + job.offset;
    if (piece.weight < 0) {
      const int64_t format_row_bytes = ::lumen::ops::row_bytes(mm.format, mm.k);
      std::vector<uint8_t> joined;
      std::vector<BlockQ8_0> converted;
      for (int wi : op.weights) {
        const gguf::TensorInfo* t = tensor_for(job, wi);
        if ((problem = check(t, 0, rows_of(t)))) return;
        const auto* q = static_cast<const uint8_t*>(format_rows(mm.format, *t, 0, rows_of(t), mm.k, converted));
        joined.insert(joined.end(), q, q + rows_of(t) * format_row_bytes);
      }
      pack_rows(mm.format, model.isa, joined.data(), mm.rows, mm.k, out, 0);
      for (int wi : op.weights) release(tensor_for(job, wi), 0, static_cast<int64_t>(tensor_for(job, wi)->n_bytes));
      return;
    }
    if (op.epilogue == Epilogue::SiluMul) {
      const gguf::TensorInfo* gate = tensor_for(job, op.weights[0]);
      const gguf::TensorInfo* up = tensor_for(job, op.weights[1]);
      if ((problem = check(gate, piece.row0, piece.rows)) || (problem = check(up, piece.row0, piece.rows))) return;
      // Gate and up alternate per row group, as the SiluMul epilogue reads them.
      std::vector<BlockQ8_0> gate_q8, up_q8;
      pack_gate_up_rows(mm.format, model.isa, format_rows(mm.format, *gate, piece.row0, piece.rows, mm.k, gate_q8),
                        format_rows(mm.format, *up, piece.row0, piece.rows, mm.k, up_q8), piece.rows, mm.k,
                        out + piece.row0 / group_rows * mm.group_bytes);
      release(gate, piece.row0 * src_row_bytes(gate), piece.rows * src_row_bytes(gate));
      release(up, piece.row0 * src_row_bytes(up), piece.rows * src_row_bytes(up));
      return;
    }
    int64_t first_row = 0;  // of this weight in the concatenation
    for (int i = 0; i < piece.weight; ++i) first_row += rows_of(tensor_for(job, op.weights[static_cast<size_t>(i)]));
    const gguf::TensorInfo* t = tensor_for(job, op.weights[static_cast<size_t>(piece.weight)]);
    if ((problem = check(t, piece.row0, piece.rows))) return;
    std::vector<BlockQ8_0> converted;
    pack_rows(mm.format, model.isa, format_rows(mm.format, *t, piece.row0, piece.rows, mm.k, converted), piece.rows,
              mm.k, out, (first_row + piece.row0) / group_rows);
    release(t, piece.row0 * src_row_bytes(t), piece.rows * src_row_bytes(t));
  });
  for (const std::optional<std::string>& why : problems)
    if (why) throw LoadError(*why);
}

}  // namespace

BoundModel bind_model(const CompiledModel& model, const gguf::File& file, bool release_file_pages,
                      ThreadPool& pool, const std::string& pack_cache_dir, bool map_pack_cache_file) {
  const Program& p = model.program;
  BoundModel b;
  b.hparams = resolve_hparams(p, file);
  bind_sizes(p, b);
  refuse_unrunnable_file_types(file);
  check_weight_types(p, file, b.n_layers);
  bind_weights(p, file, b);
  const PackPlan plan = plan_packing(model, b);
  check_kept_tensors(plan, pool);
  drop_weight_pages(plan, release_file_pages);
  auto start = std::chrono::steady_clock::now();
  const auto total = static_cast<size_t>(plan.total_bytes);
  b.packed_bytes = static_cast<uint64_t>(plan.total_bytes);
  auto finish_hit = [&](std::shared_ptr<uint8_t> storage, const std::string& cache_path) {
    b.packed_storage = std::move(storage);
    place_packed(plan, b.packed_storage.get(), b);
    b.pack_cache = "hit";
    drop_weight_pages(plan, release_file_pages);
    b.pack_cache_path = cache_path;
    b.pack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };

  std::string cache_path;
  PackCacheKey key;
  bool read_cache = true;  // false once the mapping found the file missing or bad
  if (!pack_cache_dir.empty() && plan.total_bytes > 0) {
    key = pack_cache_key(model, plan, b, release_file_pages, pool);
    cache_path = pack_cache_dir + "/" + key.hex() + ".lumenpack";
    if (map_pack_cache_file) {
      // Mapped in place when intact and (mostly) on 2 MiB pages: weights on
      // 4 KiB pages cost decode 8-13%. Else read as below.
      PackCacheMap m = map_pack_cache(cache_path, key, total, pool);
      const size_t want_huge = huge_page_bytes(total);
      if (m.result == PackCacheRead::Hit && mostly_huge(m, total)) {
        // The kernels only read the packed bytes; the mapping is read-only.
        finish_hit(std::const_pointer_cast<uint8_t>(m.data), cache_path);
        b.pack_cache_how = "mapped, " + std::to_string(want_huge == 0 ? 100 : m.huge_bytes * 100 / want_huge) +
                           "% on 2 MiB pages" + (m.reread ? " (page cache read again)" : "");
        return b;
      }
      if (m.result == PackCacheRead::Hit)
        b.pack_cache_how = "read: only " + std::to_string(m.huge_bytes * 100 / want_huge) +
                           "% of the mapping on 2 MiB pages";
      else if (!m.map_error.empty())
        b.pack_cache_how = "read: " + m.map_error;
      else
        read_cache = false;
      b.pack_cache = to_string(m.result);
    } else {
      b.pack_cache_how = "read";
    }
  }
  auto pages = std::make_shared<PageBuffer>(total, PageBuffer::Pages::Huge);
  uint8_t* storage = pages->data();
  std::shared_ptr<uint8_t> owned(pages, storage);
  if (!cache_path.empty() && read_cache) {
    const PackCacheRead read = read_pack_cache(cache_path, key, storage, total, pool);
    if (read == PackCacheRead::Hit) {
      if (b.pack_cache_how.empty()) b.pack_cache_how = "read";
      finish_hit(owned, cache_path);
      return b;
    }
    b.pack_cache = to_string(read);
    b.pack_cache_how.clear();
  }
  b.packed_storage = owned;
  place_packed(plan, storage, b);
  pack_weights(model, plan, release_file_pages, pool, storage, b);
  drop_weight_pages(plan, release_file_pages);
  if (!cache_path.empty()) {
    const std::string why = write_pack_cache(cache_path, key, storage, total, pool);
    if (why.empty()) {
      b.pack_cache_path = cache_path;
    } else {
      b.pack_cache += " (not written: " + why + ")";
    }
  }
  b.pack_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return b;
}

}  // namespace lumen::runtime
