// lumen-gguf quantize: what llama-quantize writes for the same input and
// file type. The metadata is the input's in its order, then
// general.quantization_version and general.file_type appended (llama.cpp's
// gguf_set_val removes a key and appends it); the tensors are in
// llama-quantize's order (by layer, then name), each padded to the alignment.
#include "quantize/gguf_quantize.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "lumen/common/numeric.h"
#include "lumen/gguf/gguf.h"
#include "lumen/quant/file_types.h"
#include "lumen/quant/quant.h"

namespace lumen::gguf {

namespace {

using ops::DType;

constexpr uint32_t kQuantizationVersion = 2;  // ggml's GGML_QNT_VERSION

// The types this tool reads (converts from): every weight type of the list,
// through the quant library's dequantization (ggml's to_float, exactly).
bool readable(DType t) { return quant::is_weight_type(t); }

void row_to_float(DType t, const uint8_t* row, float* y, int64_t n) { quant::dequantize_row(t, row, y, n); }

quant::QuantModel model_of(const File& file) {
  quant::QuantModel m;
  m.arch = file.get_string("general.architecture").value_or("");
  const std::string a = m.arch;
  m.n_layer = static_cast<uint32_t>(file.get_uint(a + ".block_count").value_or(0));
  m.n_head = static_cast<uint32_t>(file.get_uint(a + ".attention.head_count").value_or(0));
  m.n_head_kv = static_cast<uint32_t>(file.get_uint(a + ".attention.head_count_kv").value_or(m.n_head));
  m.n_expert = static_cast<uint32_t>(file.get_uint(a + ".expert_count").value_or(0));
  return m;
}

// Rows [begin, end) of one tensor from type `from` to `to`.
void convert_rows(const TensorInfo& t, DType from, DType to, int64_t begin, int64_t end, uint8_t* out) {
  const int64_t n = t.ne[0];
  const int64_t in_bytes = ops::row_bytes(from, n), out_bytes = ops::row_bytes(to, n);
  std::vector<float> row(static_cast<size_t>(n));
  for (int64_t r = begin; r < end; ++r) {
    row_to_float(from, t.data + r * in_bytes, row.data(), n);
    quant::quantize_row(to, row.data(), out + r * out_bytes, n);
  }
}

}  // namespace

QuantizeSummary quantize_file(const QuantizeOptions& options) {
  const std::optional<quant::FileType> ft = quant::parse_file_type(options.file_type);
  if (!ft) {
    if (quant::needs_importance_matrix(options.file_type)) {
      throw std::runtime_error("file type " + options.file_type +
                               " needs an importance matrix, which lumen-gguf does not compute");
    }
    std::string names;
    for (const quant::FileType& f : quant::kFileTypes) names.append(names.empty() ? "" : ", ").append(f.name);
    throw std::runtime_error("unknown file type '" + options.file_type + "' (one of " + names + ")");
  }
  const File in = File::open(options.input);

  std::vector<quant::QuantTensor> tensors;
  for (const TensorInfo& t : in.tensors()) {
    const std::optional<DType> type = ops::dtype_of_ggml(static_cast<uint32_t>(t.type));
    if (!type || !ops::row(*type).weight) {
      throw std::runtime_error("tensor '" + t.name + "' has type " + std::string(to_string(t.type)) +
                               ", which lumen-gguf does not read");
    }
    tensors.push_back({t.name, t.ne, *type});
  }
  const quant::TypeChoice choice = quant::choose_tensor_types(tensors, model_of(in), *ft);

  // Refuse before writing anything.
  for (size_t i = 0; i < tensors.size(); ++i) {
    const DType from = tensors[i].type, to = choice.types[i];
    if (from == to) continue;
    const bool from_quantized = from != DType::F32 && from != DType::F16 && from != DType::BF16;
    if (from_quantized && !options.allow_requantize) {
      throw std::runtime_error("tensor '" + tensors[i].name + "' is already quantized (" + ops::id_name(from) +
                               "): pass --allow-requantize to quantize it again, as llama-quantize asks");
    }
    if (!readable(from)) {
      throw std::runtime_error("tensor '" + tensors[i].name + "': converting from " + ops::id_name(from) +
                               " is not supported (lumen-gguf reads the weight types of the type list)");
    }
  }

  Writer out;
  for (const KeyValue& kv : in.metadata()) {
    if (kv.key == "general.quantization_version" || kv.key == "general.file_type" || kv.key == "split.no" ||
        kv.key == "split.count" || kv.key == "split.tensors.count") {
      continue;
    }
    out.set(kv.key, kv.value);
  }
  out.set_u32("general.quantization_version", kQuantizationVersion);
  out.set_u32("general.file_type", static_cast<uint32_t>(ft->id));

  const unsigned n_threads = std::max(1u, options.n_threads);
  for (const size_t i : quant::llama_quantize_order(tensors)) {
    const TensorInfo& t = in.tensors()[i];
    const DType from = tensors[i].type, to = choice.types[i];
    out.add_tensor(t.name, static_cast<TensorType>(ops::row(to).ggml_type), t.ne, [&t, from, to, n_threads](std::span<uint8_t> bytes) {
      if (from == to) {
        std::memcpy(bytes.data(), t.data, bytes.size());
        return;
      }
      const int64_t rows = static_cast<int64_t>(t.n_elements) / t.ne[0];
      const int64_t per = (rows + n_threads - 1) / n_threads;
      std::vector<std::thread> workers;
      for (int64_t begin = per; begin < rows; begin += per) {
        workers.emplace_back(convert_rows, std::cref(t), from, to, begin, std::min(rows, begin + per), bytes.data());
      }
      convert_rows(t, from, to, 0, std::min(rows, per), bytes.data());
      for (std::thread& w : workers) w.join();
    });
  }
  out.write(options.output);
  return {static_cast<int>(tensors.size()), choice.n_fallback, choice.n_k_quantized};
}

}  // namespace lumen::gguf
