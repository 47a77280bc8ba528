// llama-quantize's per-tensor type choice, rule for rule (llama.cpp
// src/llama-quant.cpp: llama_model_quantize_impl's "quantize this tensor?"
// filter and llama_tensor_get_type), for the file types of kFileTypes and no
// importance matrix. The branches only the IQ1/IQ2/IQ3 and TQ file types
// reach are left out: those file types are refused before.
#include "lumen/quant/file_types.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <stdexcept>

namespace lumen::quant {

namespace {

using ops::DType;
using F = FileTypeId;

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) == std::tolower(static_cast<unsigned char>(y));
         });
}

bool contains(const std::string& s, std::string_view part) { return s.find(part) != std::string::npos; }

// ggml_n_dims: the dimensions up to the last one longer than 1.
int n_dims(const std::vector<int64_t>& ne) {
  for (int i = static_cast<int>(ne.size()) - 1; i >= 1; --i) {
    if (ne[static_cast<size_t>(i)] > 1) return i + 1;
  }
  return 1;
}

// The layer of "blk.N.…", else -1 (sscanf's "blk.%d." as llama.cpp reads it).
int layer_of(const std::string& name) {
  int layer = -1;
  if (std::sscanf(name.c_str(), "blk.%d.", &layer) != 1) return -1;
  return layer;
}

bool is_quantized(DType t) { return t != DType::F32 && t != DType::F16 && t != DType::BF16; }

// llama-quantize's filter: which tensors get a new type at all (2-D and up,
// named *weight, not a norm, an expert router, a position or token-type
// embedding, or the small tensors of Mamba, RWKV and T5 it lists).
bool quantizable(const QuantTensor& t) {
  const std::string& name = t.name;
  // name.rfind("weight") == name.size() - 6 in size_t arithmetic, as llama.cpp.
  bool q = name.rfind("weight") == name.size() - 6;
  q = q && n_dims(t.ne) >= 2;
  for (const char* skip : {"_norm.weight", "ffn_gate_inp.weight", "ssm_conv1d.weight", "time_mix_first.weight",
                           "time_mix_w1.weight", "time_mix_w2.weight", "time_mix_decay_w1.weight",
                           "time_mix_decay_w2.weight", "time_mix_lerp_fused.weight", "attn_rel_b.weight"}) {
    q = q && !contains(name, skip);
  }
  return q && name != "position_embd.weight" && name != "token_types.weight";
}

// More bits for the first and last eighth of the layers and every third in between.
bool use_more_bits(int i_layer, int n_layers) {
  return i_layer < n_layers / 8 || i_layer >= 7 * n_layers / 8 || (i_layer - n_layers / 8) % 3 == 2;
}

// llama.cpp's model type 70B, for which attn_v gets more bits.
bool is_70b(const QuantModel& m) {
  if (m.n_layer != 80) return false;
  if (m.arch == "qwen2") return true;
  return m.arch == "llama" && m.n_head != m.n_head_kv;
}

struct State {
  const QuantModel& model;
  FileTypeId ftype;
  bool has_output = false;
  int n_attention_wv = 0;
  int i_attention_wv = 0, i_ffn_down = 0, i_ffn_gate = 0, i_ffn_up = 0;
  int n_fallback = 0, n_k_quantized = 0;

  bool falcon() const { return model.arch == "falcon"; }
  int n_gqa() const { return model.n_head_kv == 0 ? 0 : static_cast<int>(model.n_head / model.n_head_kv); }
  int n_expert() const { return static_cast<int>(model.n_expert); }

  // The layer the ffn rules see: the running count, or for expert models
  // (whose expert tensors are not in layer order) the name's layer.
  int layer(int counter, const std::string& name) const {
    if (n_expert() <= 1) return counter;
    const int l = layer_of(name);
    if (l < 0) throw std::runtime_error("Failed to determine layer for tensor " + name);
    if (l >= static_cast<int>(model.n_layer)) {
      throw std::runtime_error("Bad layer " + std::to_string(l) + " for tensor " + name + ". Must be in [0, " +
                               std::to_string(model.n_layer) + ")");
    }
    return l;
  }

  DType get_type(DType t, const QuantTensor& tensor);
};

// llama_tensor_get_type: the rules by tensor name, then the fallback when the
// row is not a whole number of the type's blocks.
DType State::get_type(DType t, const QuantTensor& tensor) {
  const std::string& name = tensor.name;
  const int n_layer = static_cast<int>(model.n_layer);
  const int64_t nx = tensor.ne[0];
  if (name == "output.weight" || (!has_output && name == "token_embd.weight")) {
    // The output head (or the embedding a tied head reads) gets Q6_K, or
    // Q8_0 when its rows do not fit the default type's blocks.
    if (falcon() || nx % ops::row(t).block_elems != 0) t = DType::Q8_0;
    else if (t != DType::Q8_0) t = DType::Q6_K;
  } else if (name == "token_embd.weight") {
    // Unchanged for every file type lumen-gguf writes.
  } else if (contains(name, "attn_v.weight")) {
    if (ftype == F::Q2_K) t = n_gqa() >= 4 ? DType::Q4_K : DType::Q3_K;
    else if (ftype == F::Q3_K_M) t = i_attention_wv < 2 ? DType::Q5_K : DType::Q4_K;
    else if (ftype == F::Q3_K_L) t = DType::Q5_K;
    else if ((ftype == F::IQ4_NL || ftype == F::IQ4_XS) && n_gqa() >= 4) t = DType::Q5_K;
    else if ((ftype == F::Q4_K_M || ftype == F::Q5_K_M) && use_more_bits(i_attention_wv, n_attention_wv)) t = DType::Q6_K;
    else if (ftype == F::Q4_K_S && i_attention_wv < 4) t = DType::Q5_K;
    if (is_70b(model) && (t == DType::Q3_K || t == DType::Q4_K)) t = DType::Q5_K;
    if (n_expert() == 8) t = DType::Q8_0;
    ++i_attention_wv;
  } else if (contains(name, "attn_k.weight")) {
    if (n_expert() == 8) t = DType::Q8_0;
  } else if (contains(name, "attn_q.weight")) {
    // Only the IQ3 file types change attn_q.
  } else if (contains(name, "ffn_down")) {
    const int i_layer = layer(i_ffn_down, name);
    if (ftype == F::Q2_K) {
      t = DType::Q3_K;
    } else if (ftype == F::Q3_K_M) {
      t = i_layer < n_layer / 16                             ? DType::Q5_K
          : !falcon() || use_more_bits(i_layer, n_layer) ? DType::Q4_K
                                                             : DType::Q3_K;
    } else if (ftype == F::Q3_K_L) {
      t = falcon() ? DType::Q4_K : DType::Q5_K;
    } else if (ftype == F::Q4_K_M) {
      if (falcon()) {
        t = i_layer < n_layer / 16 ? DType::Q6_K : use_more_bits(i_layer, n_layer) ? DType::Q5_K : DType::Q4_K;
      } else if (use_more_bits(i_layer, n_layer)) {
        t = DType::Q6_K;
      }
    } else if (i_layer < n_layer / 8 && (ftype == F::IQ4_NL || ftype == F::IQ4_XS)) {
      t = DType::Q5_K;
    } else if (ftype == F::Q5_K_M && use_more_bits(i_layer, n_layer)) {
      t = DType::Q6_K;
    } else if (ftype == F::Q4_K_S && !falcon() && i_layer < n_layer / 8) {
      t = DType::Q5_K;
    }
    ++i_ffn_down;
  } else if (contains(name, "attn_output.weight")) {
    if (!falcon()) {
      if (n_expert() == 8) {
        if (ftype == F::Q2_K || ftype == F::Q3_K_S || ftype == F::Q3_K_M || ftype == F::IQ4_NL ||
            ftype == F::Q4_K_S || ftype == F::Q4_K_M || ftype == F::IQ4_XS) {
          t = DType::Q5_K;
        }
      } else {
        if (ftype == F::Q2_K) t = DType::Q3_K;
        else if (ftype == F::Q3_K_M) t = DType::Q4_K;
        else if (ftype == F::Q3_K_L) t = DType::Q5_K;
      }
    } else if (ftype == F::Q3_K_L) {
      t = DType::Q4_K;
    }
  } else if (contains(name, "attn_qkv.weight")) {
    if (ftype == F::Q3_K_M || ftype == F::Q3_K_L) t = DType::Q4_K;
    else if (ftype == F::Q4_K_M) t = DType::Q5_K;
    else if (ftype == F::Q5_K_M) t = DType::Q6_K;
  } else if (contains(name, "ffn_gate")) {
    layer(i_ffn_gate, name);  // only checked: the IQ3_XS rule is the only one here
    ++i_ffn_gate;
  } else if (contains(name, "ffn_up")) {
    layer(i_ffn_up, name);
    ++i_ffn_up;
  }

  if (nx % ops::row(t).block_elems == 0) {
    ++n_k_quantized;
    return t;
  }
  // Rows that are not a whole number of super-blocks: the nearest 32-wide
  // type, and F16 when even that does not fit.
  switch (t) {
    case DType::Q2_K:
    case DType::Q3_K:
    case DType::IQ4_XS: t = DType::IQ4_NL; break;
    case DType::Q4_K: t = DType::Q5_0; break;
    case DType::Q5_K: t = DType::Q5_1; break;
    case DType::Q6_K: t = DType::Q8_0; break;
    default:
      throw std::runtime_error("tensor '" + name + "': rows of " + std::to_string(nx) + " are not a whole number of " +
                               ops::id_name(t) + " blocks (llama-quantize: Unsupported tensor size encountered)");
  }
  if (nx % ops::row(t).block_elems != 0) t = DType::F16;
  ++n_fallback;
  return t;
}

}  // namespace

std::optional<FileType> parse_file_type(std::string_view name) {
  for (const FileType& ft : kFileTypes) {
    if (iequals(name, ft.name)) return ft;
  }
  return std::nullopt;
}

bool needs_importance_matrix(std::string_view name) {
  for (const char* n : {"IQ1_S", "IQ1_M", "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ2_M", "IQ3_XXS", "IQ3_XS", "IQ3_S", "IQ3_M",
                        "Q2_K_S"}) {
    if (iequals(name, n)) return true;
  }
  return false;
}

std::vector<size_t> llama_quantize_order(const std::vector<QuantTensor>& tensors) {
  std::vector<size_t> order(tensors.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    const int la = layer_of(tensors[a].name), lb = layer_of(tensors[b].name);
    if (la != lb) return la < lb;
    return tensors[a].name < tensors[b].name;
  });
  return order;
}

TypeChoice choose_tensor_types(const std::vector<QuantTensor>& tensors, const QuantModel& model, const FileType& ft) {
  State s{model, ft.id};
  for (const QuantTensor& t : tensors) {
    if (contains(t.name, "attn_v.weight") || contains(t.name, "attn_qkv.weight") || contains(t.name, "attn_kv_b.weight")) {
      ++s.n_attention_wv;
    } else if (t.name == "output.weight") {
      s.has_output = true;
    }
  }
  if (s.n_attention_wv != 0 && s.n_attention_wv != static_cast<int>(model.n_layer)) {
    throw std::runtime_error("the model has " + std::to_string(s.n_attention_wv) + " attn_v tensors for " +
                             std::to_string(model.n_layer) + " layers (llama-quantize: n_attention_wv is unexpected)");
  }
  TypeChoice choice;
  choice.types.resize(tensors.size());
  for (const size_t i : llama_quantize_order(tensors)) {
    const QuantTensor& t = tensors[i];
    DType type = t.type;
    if (quantizable(t)) {
      type = ft.default_type;
      if (is_quantized(ft.default_type)) type = s.get_type(type, t);
    }
    choice.types[i] = type;
  }
  choice.n_fallback = s.n_fallback;
  choice.n_k_quantized = s.n_k_quantized;
  return choice;
}

}  // namespace lumen::quant
