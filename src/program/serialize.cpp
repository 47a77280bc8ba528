// The stable text form of a scheduled program (docs/runtime.md describes it):
// serialize() writes it, deserialize() reads it back. deserialize() reads the
// contents of model.so files, so it treats its input as hostile: every
// malformed line is a ParseError naming the line, never a crash.
//
// One record per line: `<kind> key=value key=value ...`; values are bare words
// or double-quoted strings with C escapes. Sizes are the one language of sizes
// as ops::Dim prints and parses it (a value with blanks is quoted), naming
// hparams; hparams, buffers and weights are otherwise named (or written
// `#<index>` when their name cannot serve as a reference).
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/program/program.h"
#include "lumen/target/weight_formats.h"
#include "lumen/common/quote.h"

namespace lumen::program {
namespace {

constexpr std::string_view kHeader = "lumen-program 3";  // 3: sizes in the one language of sizes, by name

// ================================================================== writing

bool is_identifier(std::string_view s) {
  if (s.empty()) return false;
  auto head = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; };
  if (!head(s[0])) return false;
  for (char c : s)
    if (!head(c) && !(c >= '0' && c <= '9')) return false;
  return s != "N" && s != "_" && s != "min" && s != "max";
}

// How each entry of a table is referred to: its name when that is an
// unambiguous identifier, else "#<index>".
template <typename T>
std::vector<std::string> reference_names(const std::vector<T>& table) {
  std::map<std::string, int> count;
  for (const T& t : table) ++count[t.name];
  std::vector<std::string> refs;
  for (size_t i = 0; i < table.size(); ++i) {
    const std::string& n = table[i].name;
    refs.push_back(is_identifier(n) && count[n] == 1 ? n : std::string(1, '#').append(std::to_string(i)));
  }
  return refs;
}

std::string number(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

std::string optional_number(const std::optional<double>& v) { return v ? number(*v) : "_"; }

// A value as a bare word, or quoted when it has blanks (sizes such as `a + b`).
std::string word_or_quoted(const std::string& s) { return s.find(' ') == std::string::npos ? s : quote(s); }

const char* to_string(Check::Cmp c) {
  switch (c) {
    case Check::Cmp::Eq: return "eq";
    case Check::Cmp::Ne: return "ne";
    case Check::Cmp::Lt: return "lt";
    case Check::Cmp::Le: return "le";
    case Check::Cmp::Gt: return "gt";
    case Check::Cmp::Ge: return "ge";
  }
  return "?";
}

const char* to_string(RopeMode m) { return m == RopeMode::Neox ? "neox" : "normal"; }

class TextWriter {
 public:
  explicit TextWriter(const Program& p)
      : p_(p), hparams_(reference_names(p.hparams)), buffers_(reference_names(p.buffers)),
        weights_(reference_names(p.weights)) {}

  std::string write() {
    out_ += kHeader;
    out_ += '\n';
    out_ += "program arch=" + quote(p_.arch) + " source=" + quote(p_.source_name) +
            " tokens=" + buffer_ref(p_.tokens_buffer) + " logits=" + buffer_ref(p_.logits_buffer) +
            " n_layers=" + expr(p_.n_layers) + " n_ctx_train=" + expr(p_.n_ctx_train) +
            " kv_dim=" + expr(p_.kv_dim) + " arena_bytes=" + expr(p_.arena_bytes) + "\n";
    for (const HParam& h : p_.hparams) {
      out_ += "hparam name=" + quote(h.name) + " key=" + quote(h.gguf_key) +
              " kind=" + (h.kind == HParam::Kind::Int ? "int" : "float") +
              " required=" + (h.required ? "1" : "0") + " default=" + optional_number(h.default_value) +
              " derived=" + expr(h.derived) +
              " min=" + optional_number(h.min_value) + " max=" + optional_number(h.max_value) + "\n";
    }
    for (const Check& c : p_.checks) {
      out_ += std::string("check lhs=") + expr(c.lhs) + " cmp=" + to_string(c.cmp) +
              " rhs=" + expr(c.rhs) + " message=" + quote(c.message) + "\n";
    }
    for (const Weight& w : p_.weights) {
      std::string dtypes, shape;
      for (DType d : w.dtypes) dtypes.append(dtypes.empty() ? "" : ",").append(ops::id_name(d));
      for (const Dim& e : w.shape) shape.append(shape.empty() ? "" : "|").append(dim(e));
      out_ += "weight name=" + quote(w.name) + " gguf=" + quote(w.gguf_name) +
              " per_layer=" + (w.per_layer ? "1" : "0") + " dtypes=" + (dtypes.empty() ? "_" : dtypes) +
              " shape=" + (shape.empty() ? "_" : word_or_quoted(shape)) + " fallback=" + quote(w.fallback) +
              (w.optional ? " optional=1" : "") + "\n";
    }
    for (const Buffer& b : p_.buffers) {
      out_ += "buffer name=" + quote(b.name) + " dtype=" + ops::id_name(b.dtype) +
              " rows=" + expr(b.rows) + " cols=" + expr(b.cols) + " offset=" + expr(b.offset) + "\n";
    }
    for (Section s : kSections)
      for (const Op& op : p_.ops(s)) write_op(to_string(s), op);
    return std::move(out_);
  }

 private:
  // A size names hparams: each must be one that its name refers to.
  std::string dim(const Dim& d) const {
    d.for_each_param([&](const std::string& name) {
      bool named = false;
      for (const std::string& ref : hparams_) named |= ref == name;
      if (!named) throw std::invalid_argument("serialize: a size uses '" + name + "', which is not the name of exactly one hparam");
    });
    return d.str();
  }
  std::string expr(const Dim& d) const { return word_or_quoted(dim(d)); }
  std::string expr(const std::optional<Dim>& d) const { return d ? expr(*d) : "_"; }
  std::string buffer_ref(int i) const {
    if (i < 0) return "_";
    if (i >= static_cast<int>(buffers_.size()))
      throw std::invalid_argument("serialize: buffer index " + std::to_string(i) + " out of range");
    return buffers_[static_cast<size_t>(i)];
  }
  std::string weight_ref(int i) const {
    if (i < 0 || i >= static_cast<int>(weights_.size()))
      throw std::invalid_argument("serialize: weight index " + std::to_string(i) + " out of range");
    return weights_[static_cast<size_t>(i)];
  }
  std::string hparam_ref(int i) const {
    if (i < 0) return "_";
    if (i >= static_cast<int>(hparams_.size()))
      throw std::invalid_argument("serialize: hparam index " + std::to_string(i) + " out of range");
    return hparams_[static_cast<size_t>(i)];
  }
  // "name" for a whole-buffer view, "name[offset:cols]" otherwise (unquoted:
  // the record's value quotes the whole list).
  std::string view(const View& v) const {
    if (v.buffer < 0) return "_";
    std::string name = buffer_ref(v.buffer);
    const Buffer& b = p_.buffers[static_cast<size_t>(v.buffer)];
    bool whole = v.col_offset == Dim::constant(0) && v.cols == b.cols;
    if (whole) return name;
    return name + "[" + dim(v.col_offset) + ":" + dim(v.cols) + "]";
  }

  void write_op(const char* section, const Op& op) {
    const Op defaults;
    std::string line = std::string(section) + " op=" + ops::id_name(op.kind);
    if (!op.inputs.empty()) {
      line += " in=";
      std::string list;
      for (size_t i = 0; i < op.inputs.size(); ++i) list.append(i ? "|" : "").append(view(op.inputs[i]));
      line += word_or_quoted(list);
    }
    if (op.output.buffer >= 0) line += " out=" + word_or_quoted(view(op.output));
    auto refs = [&](const char* key, const std::vector<int>& list) {
      if (list.empty()) return;
      line += std::string(" ") + key + "=";
      for (size_t i = 0; i < list.size(); ++i) line.append(i ? "," : "").append(weight_ref(list[i]));
    };
    refs("weights", op.weights);
    refs("biases", op.biases);
    if (op.residual.buffer >= 0) line += " residual=" + word_or_quoted(view(op.residual));
    if (op.epilogue != defaults.epilogue) line += std::string(" epilogue=") + to_string(op.epilogue);
    if (op.kind == OpId::MatMul) {
      // One kernel per format in each kernel field; `formats` only when not just Q8_0.
      const MatMulSchedule& s = op.schedule;
      std::string formats, decode, batch, prefill;
      for (const MatMulKernels& k : s.formats) {
        const char* sep = formats.empty() ? "" : ",";
        formats.append(sep).append(ops::id_name(k.format));
        decode.append(sep).append(to_string(k.decode_kernel));
        batch.append(sep).append(to_string(k.batch_kernel));
        prefill.append(sep).append(to_string(k.prefill_kernel));
      }
      if (s.formats.size() != 1 || s.formats[0].format != DType::Q8_0) line += " formats=" + formats;
      line += " decode_kernel=" + quote(decode) + " batch_kernel=" + quote(batch) + " prefill_kernel=" + quote(prefill) +
              " rows_per_task=" + std::to_string(s.rows_per_task) +
              " tokens_per_task=" + std::to_string(s.tokens_per_task);
    }
    if (op.eps_hparam >= 0) line += " eps=" + hparam_ref(op.eps_hparam);
    if (op.kind == OpId::Rope || op.rope_mode != defaults.rope_mode)
      line += std::string(" rope_mode=") + to_string(op.rope_mode);
    if (op.rope_base_hparam >= 0) line += " rope_base=" + hparam_ref(op.rope_base_hparam);
    if (op.n_heads) line += " n_heads=" + expr(op.n_heads);
    if (op.n_heads_kv) line += " n_heads_kv=" + expr(op.n_heads_kv);
    if (op.head_dim) line += " head_dim=" + expr(op.head_dim);
    if (op.attn_scale_hparam >= 0) line += " attn_scale=" + hparam_ref(op.attn_scale_hparam);
    if (op.attn_scale_rsqrt) line += " attn_scale_rsqrt=" + expr(op.attn_scale_rsqrt);
    if (op.attn_softcap_hparam >= 0) line += " attn_softcap=" + hparam_ref(op.attn_softcap_hparam);
    if (op.scalar_hparam >= 0) line += " scalar=" + hparam_ref(op.scalar_hparam);
    if (op.scalar_sqrt) line += " scalar_sqrt=" + expr(op.scalar_sqrt);
    if (op.window) line += " window=" + expr(op.window);
    if (op.window_pattern) line += " window_pattern=" + expr(op.window_pattern);
    if (op.line != 0) line += " line=" + std::to_string(op.line);
    out_ += line + "\n";
  }

  const Program& p_;
  std::vector<std::string> hparams_, buffers_, weights_;
  std::string out_;
};

// ================================================================== reading

struct Record {
  int line = 0;
  std::string kind;
  std::vector<std::pair<std::string, std::string>> fields;
};

[[noreturn]] void fail(int line, const std::string& message) {
  throw ParseError("line " + std::to_string(line) + ": " + message);
}

// The runtime calls a matmul's kernels by its row count (1, up to
// kBatchMaxTokens, more) and never checks them: each must be of its kind and
// have the op's epilogue.
void check_schedule(int line, const Op& op) {
  if (op.kind != OpId::MatMul) return;
  for (const MatMulKernels& s : op.schedule.formats) {
    const std::pair<const char*, std::pair<KernelId, KernelKind>> slots[] = {
        {"decode_kernel", {s.decode_kernel, KernelKind::Gemv}},
        {"batch_kernel", {s.batch_kernel, KernelKind::Batch}},
        {"prefill_kernel", {s.prefill_kernel, KernelKind::Gemm}}};
    for (const auto& [field, slot] : slots) {
      const auto& [kernel, kind] = slot;
      // A prefill may run the batch kernel (formats with no GEMM).
      const bool chunked = kind == KernelKind::Gemm && kernel == s.batch_kernel;
      if ((kernel.kind != kind && !chunked) || kernel.epilogue != op.epilogue)
        fail(line, std::string(field) + " '" + to_string(kernel) + "' is not a " + to_string(kind) +
                       " kernel with the op's epilogue '" + to_string(op.epilogue) + "'" +
                       (kind == KernelKind::Gemm ? " (nor the batch kernel)" : ""));
      // A GEMM reads its set's format (a k-quant's, expanded per task) or Q8_0: a
      // set of a format that converts to it exactly may name a Q8_0 one.
      const bool converted =
          kernel.kind == KernelKind::Gemm && converts_exactly_to_q8_0(s.format) && kernel.weight == DType::Q8_0;
      if (kernel.weight != s.format && !converted)
        fail(line, std::string(field) + " '" + to_string(kernel) + "' does not read the format " +
                       ops::id_name(s.format));
    }
  }
}

// Splits one line into its kind and key=value fields, unescaping quoted values.
Record lex_line(std::string_view text, int line) {
  Record r;
  r.line = line;
  size_t i = 0;
  auto skip_space = [&] {
    while (i < text.size() && (text[i] == ' ' || text[i] == '\t')) ++i;
  };
  skip_space();
  while (i < text.size() && text[i] != ' ' && text[i] != '\t') r.kind += text[i++];
  while (true) {
    skip_space();
    if (i >= text.size()) break;
    std::string key;
    while (i < text.size() && text[i] != '=' && text[i] != ' ' && text[i] != '\t') key += text[i++];
    if (i >= text.size() || text[i] != '=') fail(line, "expected key=value, got '" + key + "'");
    ++i;
    std::string value;
    if (i < text.size() && text[i] == '"') {
      ++i;
      bool closed = false;
      while (i < text.size()) {
        char c = text[i++];
        if (c == '"') {
          closed = true;
          break;
        }
        if (c != '\\') {
          value += c;
          continue;
        }
        if (i >= text.size()) break;
        char e = text[i++];
        switch (e) {
          case 'n': value += '\n'; break;
          case 't': value += '\t'; break;
          case '"': value += '"'; break;
          case '\\': value += '\\'; break;
          case 'x': {
            auto hex = [&](char h) -> int {
              if (h >= '0' && h <= '9') return h - '0';
              if (h >= 'a' && h <= 'f') return h - 'a' + 10;
              if (h >= 'A' && h <= 'F') return h - 'A' + 10;
              return -1;
            };
            if (i + 2 > text.size() || hex(text[i]) < 0 || hex(text[i + 1]) < 0)
              fail(line, "bad \\x escape in the value of '" + key + "'");
            value += static_cast<char>(hex(text[i]) * 16 + hex(text[i + 1]));
            i += 2;
            break;
          }
          default: fail(line, std::string("unknown escape \\") + e + " in the value of '" + key + "'");
        }
      }
      if (!closed) fail(line, "unterminated string in the value of '" + key + "'");
      if (i < text.size() && text[i] != ' ' && text[i] != '\t')
        fail(line, "junk after the string value of '" + key + "'");
    } else {
      while (i < text.size() && text[i] != ' ' && text[i] != '\t') value += text[i++];
    }
    for (const auto& f : r.fields)
      if (f.first == key) fail(line, "duplicate field '" + key + "'");
    r.fields.emplace_back(std::move(key), std::move(value));
  }
  return r;
}

int64_t parse_int(std::string_view s, int line, const std::string& what) {
  bool negative = !s.empty() && s[0] == '-';
  size_t i = negative ? 1 : 0;
  if (i >= s.size()) fail(line, "expected an integer for " + what + ", got '" + std::string(s) + "'");
  uint64_t magnitude = 0;
  for (; i < s.size(); ++i) {
    if (s[i] < '0' || s[i] > '9')
      fail(line, "expected an integer for " + what + ", got '" + std::string(s) + "'");
    if (magnitude > (UINT64_MAX - 9) / 10) fail(line, "integer out of range for " + what);
    magnitude = magnitude * 10 + static_cast<uint64_t>(s[i] - '0');
  }
  constexpr uint64_t kLimit = uint64_t{1} << 63;
  if (magnitude > (negative ? kLimit : kLimit - 1)) fail(line, "integer out of range for " + what);
  if (negative) return magnitude == kLimit ? INT64_MIN : -static_cast<int64_t>(magnitude);
  return static_cast<int64_t>(magnitude);
}

// Reads one record's fields into typed values, with references resolved.
class RecordReader {
 public:
  RecordReader(const Record& r, const Program& p, const std::map<std::string, int>& hparam_names,
               const std::map<std::string, int>& buffer_names,
               const std::map<std::string, int>& weight_names)
      : r_(r), p_(p), hparam_names_(hparam_names), buffer_names_(buffer_names),
        weight_names_(weight_names), used_(r.fields.size(), false) {}

  std::optional<std::string> get(const std::string& key) {
    for (size_t i = 0; i < r_.fields.size(); ++i) {
      if (r_.fields[i].first == key) {
        used_[i] = true;
        return r_.fields[i].second;
      }
    }
    return std::nullopt;
  }
  std::string need(const std::string& key) {
    auto v = get(key);
    if (!v) fail(r_.line, "missing field '" + key + "' in '" + r_.kind + "'");
    return *v;
  }
  // Every field must have been consumed: a typo is an error, not ignored.
  void finish() {
    for (size_t i = 0; i < used_.size(); ++i)
      if (!used_[i]) fail(r_.line, "unknown field '" + r_.fields[i].first + "' in '" + r_.kind + "'");
  }

  int64_t integer(const std::string& key, int64_t fallback) {
    auto v = get(key);
    return v ? parse_int(*v, r_.line, "'" + key + "'") : fallback;
  }
  // A kernel field: one kernel per format, comma-separated; `fallback` for each when absent.
  std::vector<KernelId> kernel_list(const std::string& key, size_t formats, const KernelId& fallback) {
    auto v = get(key);
    if (!v) return std::vector<KernelId>(formats, fallback);
    std::vector<KernelId> out;
    for (const std::string& text : split(*v, ',')) {
      std::string why;
      std::optional<KernelId> k = parse_kernel_id(text, &why);
      if (!k) fail(r_.line, "bad kernel '" + text + "' for '" + key + "': " + why);
      out.push_back(*k);
    }
    if (out.size() != formats)
      fail(r_.line, "'" + key + "' names " + std::to_string(out.size()) + " kernel(s) for " + std::to_string(formats) +
                        " format(s)");
    return out;
  }
  bool flag(const std::string& key) {
    std::string v = need(key);
    if (v == "0") return false;
    if (v == "1") return true;
    fail(r_.line, "expected 0 or 1 for '" + key + "', got '" + v + "'");
  }
  std::optional<double> optional_number(const std::string& key) {
    std::string v = need(key);
    if (v == "_") return std::nullopt;
    errno = 0;
    char* end = nullptr;
    double d = std::strtod(v.c_str(), &end);
    if (v.empty() || end != v.c_str() + v.size() || errno == ERANGE)
      fail(r_.line, "expected a number for '" + key + "', got '" + v + "'");
    return d;
  }
  // A required size, or an optional one (absent or `_`).
  Dim expr_field(const std::string& key) { return expr(need(key), key); }
  std::optional<Dim> optional_expr_field(const std::string& key, bool field_required) {
    auto v = field_required ? std::optional<std::string>(need(key)) : get(key);
    if (!v || *v == "_") return std::nullopt;
    return expr(*v, key);
  }
  int hparam_field(const std::string& key) {
    auto v = get(key);
    if (!v || *v == "_") return -1;
    return resolve(*v, hparam_names_, static_cast<int>(p_.hparams.size()), "hparam");
  }
  int buffer_field(const std::string& key) {
    std::string v = need(key);
    if (v == "_") return -1;
    return resolve(v, buffer_names_, static_cast<int>(p_.buffers.size()), "buffer");
  }
  std::vector<int> weight_list(const std::string& key) {
    std::vector<int> out;
    auto v = get(key);
    if (!v || v->empty()) return out;
    for (const std::string& item : split(*v, ','))
      out.push_back(resolve(item, weight_names_, static_cast<int>(p_.weights.size()), "weight"));
    return out;
  }
  View view_field(const std::string& key) {
    auto v = get(key);
    if (!v) return View{};
    return view(*v, key);
  }
  std::vector<View> view_list(const std::string& key) {
    std::vector<View> out;
    auto v = get(key);
    if (!v || v->empty()) return out;
    for (const std::string& item : split(*v, '|')) out.push_back(view(item, key));
    return out;
  }
  int line() const { return r_.line; }

  static std::vector<std::string> split(const std::string& s, char sep) {
    std::vector<std::string> out(1);
    for (char c : s) {
      if (c == sep)
        out.emplace_back();
      else
        out.back() += c;
    }
    return out;
  }

  // A size in the one language of sizes; every hparam it names must exist (and be unambiguous).
  Dim expr(const std::string& text, const std::string& key) {
    Dim d;
    try {
      d = ops::parse_dim(text);
    } catch (const ops::DimParseError& e) {
      fail(r_.line, "in expression '" + text + "' of '" + key + "': " + e.what());
    }
    d.for_each_param([&](const std::string& name) {
      if (!hparam_names_.count(name)) fail(r_.line, "unknown hparam '" + name + "' in '" + key + "'");
    });
    return d;
  }

 private:
  int resolve(const std::string& ref, const std::map<std::string, int>& names, int count,
              const char* what) {
    if (!ref.empty() && ref[0] == '#') {
      int64_t i = parse_int(std::string_view(ref).substr(1), r_.line, std::string(what) + " index");
      if (i < 0 || i >= count) fail(r_.line, std::string(what) + " index " + ref + " out of range");
      return static_cast<int>(i);
    }
    auto it = names.find(ref);
    if (it == names.end()) fail(r_.line, std::string("unknown ") + what + " '" + ref + "'");
    return it->second;
  }

  View view(const std::string& text, const std::string& key) {
    View v;
    if (text == "_") return v;
    size_t bracket = text.find('[');
    if (bracket == std::string::npos) {
      v.buffer = resolve(text, buffer_names_, static_cast<int>(p_.buffers.size()), "buffer");
      v.col_offset = Dim::constant(0);
      v.cols = p_.buffers[static_cast<size_t>(v.buffer)].cols;
      return v;
    }
    size_t colon = text.find(':', bracket);
    if (text.back() != ']' || colon == std::string::npos)
      fail(r_.line, "malformed view '" + text + "' in '" + key + "' (want name[offset:cols])");
    v.buffer = resolve(text.substr(0, bracket), buffer_names_, static_cast<int>(p_.buffers.size()),
                       "buffer");
    v.col_offset = expr(text.substr(bracket + 1, colon - bracket - 1), key);
    v.cols = expr(text.substr(colon + 1, text.size() - colon - 2), key);
    return v;
  }

  const Record& r_;
  const Program& p_;
  const std::map<std::string, int>& hparam_names_;
  const std::map<std::string, int>& buffer_names_;
  const std::map<std::string, int>& weight_names_;
  std::vector<bool> used_;
};

template <typename Enum, size_t N>
Enum parse_enum(const std::string& text, const Enum (&values)[N], const char* (*name)(Enum), int line,
                const char* what) {
  for (Enum v : values)
    if (text == name(v)) return v;
  fail(line, std::string("unknown ") + what + " '" + text + "'");
}

constexpr Check::Cmp kCmps[] = {Check::Cmp::Eq, Check::Cmp::Ne, Check::Cmp::Lt,
                                Check::Cmp::Le, Check::Cmp::Gt, Check::Cmp::Ge};
constexpr RopeMode kRopeModes[] = {RopeMode::Normal, RopeMode::Neox};

DType parse_dtype(const std::string& s, int line) {
  std::optional<DType> d = ops::parse_dtype_id(s);
  if (!d) fail(line, "unknown dtype '" + s + "'");
  return *d;
}

// An op of the list that exists in the program, by its enumerator's name.
OpId parse_op(const std::string& s, int line) {
  std::optional<OpId> id = ops::parse_op_id(s);
  if (!id || !ops::row(*id).in_program) fail(line, "unknown op '" + s + "'");
  return *id;
}

// Names of a table, for references; a duplicated name is only reachable by index.
template <typename T>
std::map<std::string, int> name_table(const std::vector<T>& table) {
  std::map<std::string, int> names, count;
  for (size_t i = 0; i < table.size(); ++i) {
    names.emplace(table[i].name, static_cast<int>(i));
    ++count[table[i].name];
  }
  for (const auto& [n, c] : count)
    if (c > 1) names.erase(n);
  return names;
}

}  // namespace

std::string serialize(const Program& p) { return TextWriter(p).write(); }

Program deserialize(std::string_view text) {
  // Lex every line first: names are resolved once all tables are known.
  std::vector<Record> records;
  bool header_seen = false;
  int line_no = 0;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(start, end - start);
    start = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#') continue;
    if (!header_seen) {
      if (line != kHeader) fail(line_no, "expected the header '" + std::string(kHeader) + "'");
      header_seen = true;
      continue;
    }
    records.push_back(lex_line(line, line_no));
  }
  if (!header_seen) fail(line_no, "empty program (no '" + std::string(kHeader) + "' header)");

  Program p;
  // Pass 1: the tables, by name only, so that any record may refer to any entry.
  for (const Record& r : records) {
    auto name = [&]() -> std::string {
      for (const auto& f : r.fields)
        if (f.first == "name") return f.second;
      fail(r.line, "missing field 'name' in '" + r.kind + "'");
    };
    if (r.kind == "hparam") p.hparams.emplace_back().name = name();
    else if (r.kind == "weight") p.weights.emplace_back().name = name();
    else if (r.kind == "buffer") p.buffers.emplace_back().name = name();
  }
  const auto hparam_names = name_table(p.hparams);
  const auto buffer_names = name_table(p.buffers);
  const auto weight_names = name_table(p.weights);

  // Pass 2a: buffers first, since whole-buffer views copy their cols.
  size_t n_buffer = 0;
  for (const Record& r : records) {
    if (r.kind != "buffer") continue;
    RecordReader rd(r, p, hparam_names, buffer_names, weight_names);
    Buffer& b = p.buffers[n_buffer++];
    rd.need("name");
    b.dtype = parse_dtype(rd.need("dtype"), r.line);
    if (!ops::row(b.dtype).activation) fail(r.line, std::string("a buffer cannot hold ") + ops::id_name(b.dtype));
    b.rows = rd.expr_field("rows");
    b.cols = rd.expr_field("cols");
    b.offset = rd.expr_field("offset");
    rd.finish();
  }

  // Pass 2b: everything else, in file order.
  size_t n_hparam = 0, n_weight = 0;
  bool program_seen = false;
  for (const Record& r : records) {
    RecordReader rd(r, p, hparam_names, buffer_names, weight_names);
    const Op* op_read = nullptr;  // the op of a pre/layer/post record
    if (r.kind == "buffer") continue;
    if (r.kind == "program") {
      if (program_seen) fail(r.line, "a second 'program' record");
      program_seen = true;
      p.arch = rd.need("arch");
      p.source_name = rd.need("source");
      p.tokens_buffer = rd.buffer_field("tokens");
      p.logits_buffer = rd.buffer_field("logits");
      p.n_layers = rd.expr_field("n_layers");
      p.n_ctx_train = rd.expr_field("n_ctx_train");
      p.kv_dim = rd.expr_field("kv_dim");
      p.arena_bytes = rd.expr_field("arena_bytes");
    } else if (r.kind == "hparam") {
      HParam& h = p.hparams[n_hparam++];
      rd.need("name");
      h.gguf_key = rd.need("key");
      std::string kind = rd.need("kind");
      if (kind == "int") h.kind = HParam::Kind::Int;
      else if (kind == "float") h.kind = HParam::Kind::Float;
      else fail(r.line, "unknown hparam kind '" + kind + "' (want int or float)");
      h.required = rd.flag("required");
      h.default_value = rd.optional_number("default");
      h.derived = rd.optional_expr_field("derived", true);
      h.min_value = rd.optional_number("min");
      h.max_value = rd.optional_number("max");
    } else if (r.kind == "check") {
      Check& c = p.checks.emplace_back();
      c.lhs = rd.expr_field("lhs");
      c.cmp = parse_enum<Check::Cmp>(rd.need("cmp"), kCmps, to_string, r.line, "comparison");
      c.rhs = rd.expr_field("rhs");
      c.message = rd.need("message");
    } else if (r.kind == "weight") {
      Weight& w = p.weights[n_weight++];
      rd.need("name");
      w.gguf_name = rd.need("gguf");
      w.per_layer = rd.flag("per_layer");
      std::string dtypes = rd.need("dtypes");
      if (dtypes != "_")
        for (const std::string& d : RecordReader::split(dtypes, ',')) {
          w.dtypes.push_back(parse_dtype(d, r.line));
          if (!ops::row(w.dtypes.back()).weight) fail(r.line, "a weight cannot be " + d);
        }
      if (w.dtypes.empty()) fail(r.line, "a weight needs its type");
      if (!w.per_layer && w.dtypes.size() > 1) fail(r.line, "a global weight has one type");
      std::string shape = rd.need("shape");
      if (shape != "_")
        for (const std::string& e : RecordReader::split(shape, '|')) w.shape.push_back(rd.expr(e, "shape"));
      w.fallback = rd.need("fallback");
      if (auto o = rd.get("optional")) w.optional = *o == "1";
    } else if (r.kind == "pre" || r.kind == "layer" || r.kind == "post") {
      std::vector<Op>& section = r.kind == "pre" ? p.pre : r.kind == "layer" ? p.layer : p.post;
      Op& op = section.emplace_back();
      op_read = &op;
      op.kind = parse_op(rd.need("op"), r.line);
      op.inputs = rd.view_list("in");
      op.output = rd.view_field("out");
      op.weights = rd.weight_list("weights");
      op.biases = rd.weight_list("biases");
      op.residual = rd.view_field("residual");
      if (auto e = rd.get("epilogue")) {
        std::optional<Epilogue> epilogue = ops::parse_epilogue(*e);
        if (!epilogue) fail(r.line, "unknown epilogue '" + *e + "'");
        op.epilogue = *epilogue;
      }
      MatMulSchedule& s = op.schedule;
      std::vector<DType> formats = {DType::Q8_0};
      if (auto f = rd.get("formats")) {
        formats.clear();
        for (const std::string& d : RecordReader::split(*f, ',')) {
          formats.push_back(parse_dtype(d, r.line));
          if (!ops::row(formats.back()).weight) fail(r.line, "a packed weight format cannot be " + d);
          for (size_t i = 0; i + 1 < formats.size(); ++i)
            if (formats[i] == formats.back()) fail(r.line, "format " + d + " named twice");
        }
      }
      const std::vector<KernelId> decode = rd.kernel_list("decode_kernel", formats.size(), KernelId{});
      const std::vector<KernelId> batch = rd.kernel_list("batch_kernel", formats.size(), KernelId::batch(op.epilogue));
      const std::vector<KernelId> prefill =
          rd.kernel_list("prefill_kernel", formats.size(), MatMulKernels{}.prefill_kernel);
      s.formats.clear();
      for (size_t i = 0; i < formats.size(); ++i) s.formats.push_back({formats[i], decode[i], batch[i], prefill[i]});
      s.rows_per_task = rd.integer("rows_per_task", s.rows_per_task);
      s.tokens_per_task = rd.integer("tokens_per_task", s.tokens_per_task);
      op.eps_hparam = rd.hparam_field("eps");
      if (auto m = rd.get("rope_mode"))
        op.rope_mode = parse_enum<RopeMode>(*m, kRopeModes, to_string, r.line, "rope mode");
      op.rope_base_hparam = rd.hparam_field("rope_base");
      op.n_heads = rd.optional_expr_field("n_heads", false);
      op.n_heads_kv = rd.optional_expr_field("n_heads_kv", false);
      op.head_dim = rd.optional_expr_field("head_dim", false);
      op.attn_scale_hparam = rd.hparam_field("attn_scale");
      op.attn_scale_rsqrt = rd.optional_expr_field("attn_scale_rsqrt", false);
      op.attn_softcap_hparam = rd.hparam_field("attn_softcap");
      op.scalar_hparam = rd.hparam_field("scalar");
      op.scalar_sqrt = rd.optional_expr_field("scalar_sqrt", false);
      op.window = rd.optional_expr_field("window", false);
      op.window_pattern = rd.optional_expr_field("window_pattern", false);
      int64_t src_line = rd.integer("line", 0);
      if (src_line < 0 || src_line > INT32_MAX) fail(r.line, "source line out of range");
      op.line = static_cast<int>(src_line);
    } else {
      fail(r.line, "unknown record '" + r.kind + "'");
    }
    rd.finish();
    if (op_read) check_schedule(r.line, *op_read);
  }
  if (!program_seen) fail(line_no, "missing the 'program' record");
  return p;
}

}  // namespace lumen::program
