// Byte-level BPE and SentencePiece (SPM) tokenizers, matching llama.cpp
// (src/llama-vocab.cpp, src/unicode.cpp) token for token. See docs/tokenizer.md.
//
// Pipeline of encode(): special-token partition -> for BPE, the pre-tokenizer
// split of each raw fragment -> GPT-2 byte mapping -> BPE merges per word;
// for SPM, the leading space and U+2581 for spaces -> merges by score -> ids.
// Internally BPE works on "pieces": interned strings numbered like the token
// ids where the string is a token, so merges are a hash lookup on a pair of
// integers rather than on strings.
#include <algorithm>
#include <array>
#include <cstdint>
#include <queue>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "lumen/gguf/gguf.h"
#include "lumen/text/pre_tokenizer.h"
#include "lumen/text/tokenizer.h"

namespace lumen {

namespace {


// ---------------------------------------------------------------------------
// GPT-2 byte <-> unicode mapping (printable bytes map to themselves; the other
// 68 bytes map to U+0100.. in increasing byte order).
struct ByteMapping {
  std::array<std::string, 256> byte_to_text;
  std::array<int16_t, 0x144> cpt_to_byte;  // -1: not a mapped codepoint; all mapped ones are < 0x144

  ByteMapping() {
    cpt_to_byte.fill(-1);
    uint32_t next_extra = 0x100;
    for (uint32_t b = 0; b < 256; ++b) {
      const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
      const uint32_t cpt = printable ? b : next_extra++;
      unicode::append_utf8(byte_to_text[b], cpt);
      cpt_to_byte[cpt] = static_cast<int16_t>(b);
    }
  }
};

const ByteMapping& byte_mapping() {
  static const ByteMapping mapping;
  return mapping;
}

// Runs a pre-tokenizer over text and calls word(piece) for each word, in
// order. Like llama.cpp, invalid UTF-8 reads as U+FFFD first (and words are
// cut from that cleaned text).
template <typename Word>
void for_each_word(const RegexSplitter& splitter, std::string_view text, Word&& word) {
  std::string clean;
  clean.reserve(text.size());
  bool has_surrogates = false;
  for (uint32_t cpt : unicode::decode_utf8(text)) {
    has_surrogates |= cpt >= 0xD800 && cpt <= 0xDFFF;
    unicode::append_utf8(clean, cpt);
  }
  // Surrogates (which llama.cpp keeps) are not UTF-8 to PCRE2: the regexes
  // see U+FFFD in their place, which has the same length.
  std::string regex_text;
  if (has_surrogates) {
    regex_text = clean;
    for (size_t i = 0; i + 2 < regex_text.size(); ++i) {
      if (static_cast<uint8_t>(regex_text[i]) == 0xED && static_cast<uint8_t>(regex_text[i + 1]) >= 0xA0) {
        regex_text.replace(i, 3, "\xEF\xBF\xBD");
        i += 2;
      }
    }
  }
  for (const auto& [offset, length] : splitter.split(has_surrogates ? regex_text : clean)) {
    word(std::string_view(clean).substr(offset, length));
  }
}

}  // namespace

const std::string& byte_to_token_char(uint8_t b) { return byte_mapping().byte_to_text[b]; }

std::vector<std::string> pre_tokenize(std::string_view pre, std::string_view text) {
  const PreTokenizerSpec* spec = find_pre_tokenizer(pre);
  if (!spec) throw std::runtime_error("tokenizer: unknown pre-tokenizer '" + std::string(pre) + "'");
  std::vector<std::string> words;
  for_each_word(RegexSplitter(spec->regexes), text, [&](std::string_view w) { words.emplace_back(w); });
  return words;
}

// ---------------------------------------------------------------------------
// Vocabulary metadata

namespace {

[[noreturn]] void fail(const std::string& message) {
  throw std::runtime_error("tokenizer: " + message);
}

template <typename T>
std::optional<T> get_checked(const std::string& key, auto&& getter) {
  try {
    return getter(key);
  } catch (const gguf::Error& e) {
    fail(e.what());
  }
}

}  // namespace

// The tokenizer metadata with the two big string arrays as views, so that
// loading from a GGUF file does not copy 300k strings.
struct detail::VocabularyView {
  std::string model, pre;
  std::vector<std::string_view> tokens, merges;
  std::vector<float> scores;
  std::vector<TokenType> types;
  std::optional<int64_t> bos, eos, eot, eom, unk, pad;
  std::optional<bool> add_bos, add_eos, add_space_prefix;
};

namespace {

using detail::VocabularyView;

// Views of the strings of an array-of-strings key; nullopt when absent.
std::optional<std::vector<std::string_view>> string_array_view(const gguf::File& file, const std::string& key) {
  const gguf::KeyValue* kv = file.find(key);
  if (!kv) return std::nullopt;
  if (kv->value.type != gguf::ValueType::Array || kv->value.array().elem_type != gguf::ValueType::String) {
    fail("key " + key + " has wrong type " + std::string(gguf::to_string(kv->value.type)) +
         (kv->value.type == gguf::ValueType::Array
              ? " of " + std::string(gguf::to_string(kv->value.array().elem_type))
              : std::string()) +
         ", expected array of string");
  }
  std::vector<std::string_view> views;
  views.reserve(kv->value.array().items.size());
  for (const gguf::Scalar& item : kv->value.array().items) views.emplace_back(std::get<std::string>(item));
  return views;
}

VocabularyView view_of(const gguf::File& file) {
  VocabularyView v;
  const auto get_string = [&](const std::string& key) {
    return get_checked<std::string>(key, [&](const std::string& k) { return file.get_string(k); });
  };
  const auto get_id = [&](const std::string& key) {
    return get_checked<int64_t>(key, [&](const std::string& k) { return file.get_int(k); });
  };
  const auto get_bool = [&](const std::string& key) {
    return get_checked<bool>(key, [&](const std::string& k) { return file.get_bool(k); });
  };

  const auto model = get_string("tokenizer.ggml.model");
  if (!model) fail("missing key tokenizer.ggml.model");
  v.model = *model;
  // Absent for SPM files and old BPE ones; llama.cpp reads "default" then.
  v.pre = get_string("tokenizer.ggml.pre").value_or("");

  auto tokens = string_array_view(file, "tokenizer.ggml.tokens");
  if (!tokens) fail("missing key tokenizer.ggml.tokens");
  v.tokens = std::move(*tokens);
  if (auto merges = string_array_view(file, "tokenizer.ggml.merges")) v.merges = std::move(*merges);
  // Scores are f32; llama.cpp also reads an i32 array.
  const gguf::KeyValue* scores_kv = file.find("tokenizer.ggml.scores");
  if (scores_kv && scores_kv->value.type == gguf::ValueType::Array &&
      scores_kv->value.array().elem_type == gguf::ValueType::I32) {
    const std::vector<int32_t> scores = file.get_i32_array("tokenizer.ggml.scores").value_or(std::vector<int32_t>{});
    v.scores.assign(scores.begin(), scores.end());
  } else if (auto scores = get_checked<std::vector<float>>(
                 "tokenizer.ggml.scores", [&](const std::string& k) { return file.get_f32_array(k); })) {
    v.scores = std::move(*scores);
  }

  const auto types = get_checked<std::vector<int32_t>>(
      "tokenizer.ggml.token_type", [&](const std::string& k) { return file.get_i32_array(k); });
  if (types) {
    v.types.reserve(types->size());
    for (int32_t t : *types) v.types.push_back(static_cast<TokenType>(t));
  }

  v.bos = get_id("tokenizer.ggml.bos_token_id");
  v.eos = get_id("tokenizer.ggml.eos_token_id");
  v.eot = get_id("tokenizer.ggml.eot_token_id");
  v.eom = get_id("tokenizer.ggml.eom_token_id");
  v.unk = get_id("tokenizer.ggml.unknown_token_id");
  v.pad = get_id("tokenizer.ggml.padding_token_id");
  v.add_bos = get_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = get_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = get_bool("tokenizer.ggml.add_space_prefix");
  return v;
}

// Vocabulary owns its strings, VocabularyView points into the GGUF file:
// the same fields, copied either way.
template <class To, class From>
To copy_vocabulary(const From& from) {
  To to;
  to.model = from.model;
  to.pre = from.pre;
  to.tokens.assign(from.tokens.begin(), from.tokens.end());
  to.merges.assign(from.merges.begin(), from.merges.end());
  to.scores = from.scores;
  to.types = from.types;
  to.bos = from.bos;
  to.eos = from.eos;
  to.eot = from.eot;
  to.eom = from.eom;
  to.unk = from.unk;
  to.pad = from.pad;
  to.add_bos = from.add_bos;
  to.add_eos = from.add_eos;
  to.add_space_prefix = from.add_space_prefix;
  return to;
}

VocabularyView view_of(const Vocabulary& vocab) { return copy_vocabulary<VocabularyView>(vocab); }

}  // namespace

Vocabulary Vocabulary::from_gguf(const gguf::File& file) { return copy_vocabulary<Vocabulary>(view_of(file)); }

// ---------------------------------------------------------------------------
// Tokenizer

namespace {

// Open-addressing hash tables: loading builds about 450k entries, and node
// based maps spend most of the load time in allocation and cache misses.

// Text -> piece id. Keys are not stored; texts are read back through the
// caller's text_of(id), so a slot is 8 bytes.
class PieceTable {
 public:
  void reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < n + n / 2) capacity *= 2;
    slots_.assign(capacity, Slot{0, -1});
    mask_ = capacity - 1;
  }
  // Slot of text: its entry, or the empty slot where it would go.
  template <typename TextOf>
  size_t locate(std::string_view text, uint64_t hash, const TextOf& text_of) const {
    const auto tag = static_cast<uint32_t>(hash >> 32);
    size_t i = hash & mask_;
    while (slots_[i].id >= 0 && !(slots_[i].tag == tag && text_of(slots_[i].id) == text)) i = (i + 1) & mask_;
    return i;
  }
  int32_t id_at(size_t slot) const { return slots_[slot].id; }
  void set(size_t slot, uint64_t hash, int32_t id) {
    if (slots_[slot].id < 0) ++size_;
    slots_[slot] = Slot{static_cast<uint32_t>(hash >> 32), id};
  }
  // Linear probing stays short up to a load of 3/4.
  bool needs_growth() const { return 4 * (size_ + 1) > 3 * slots_.size(); }
  void prefetch(uint64_t hash) const { __builtin_prefetch(&slots_[hash & mask_]); }
  // Doubles the table; text_of must still resolve every stored id.
  template <typename TextOf>
  void grow(const TextOf& text_of) {
    std::vector<Slot> old;
    old.swap(slots_);
    slots_.assign(old.size() * 2, Slot{0, -1});
    mask_ = slots_.size() - 1;
    for (const Slot& s : old) {
      if (s.id < 0) continue;
      const std::string_view text = text_of(s.id);
      slots_[locate(text, hash(text), text_of)] = s;
    }
  }
  static uint64_t hash(std::string_view text) {
    // FNV-1a, then a multiply to spread the bits over both halves.
    uint64_t h = 0xcbf29ce484222325ull;
    for (unsigned char c : text) h = (h ^ c) * 0x100000001b3ull;
    return h * 0x9E3779B97F4A7C15ull;
  }

 private:
  struct Slot {
    uint32_t tag;  // high half of the hash; the low bits pick the slot
    int32_t id;    // -1: empty
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

struct Merge {
  int32_t rank;
  int32_t result;  // piece id of left + right
};

// (left piece, right piece) -> merge.
class MergeTable {
 public:
  void reserve(size_t n) {
    size_t capacity = 16;
    while (capacity < n + n / 2) capacity *= 2;
    slots_.assign(capacity, Slot{kEmpty, {}});
    mask_ = capacity - 1;
  }
  const Merge* find(int32_t left, int32_t right) const {
    const uint64_t key = pair_key(left, right);
    for (size_t i = slot_of(key);; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].merge;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }
  void prefetch(int32_t left, int32_t right) const { __builtin_prefetch(&slots_[slot_of(pair_key(left, right))]); }
  // Keeps the first merge of a pair, as llama.cpp's bpe_ranks.emplace does.
  void insert_if_absent(int32_t left, int32_t right, Merge merge) {
    const uint64_t key = pair_key(left, right);
    size_t i = slot_of(key);
    while (slots_[i].key != kEmpty) {
      if (slots_[i].key == key) return;
      i = (i + 1) & mask_;
    }
    slots_[i] = Slot{key, merge};
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    Merge merge;
  };
  static uint64_t pair_key(int32_t left, int32_t right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  size_t slot_of(uint64_t key) const { return ((key * 0x9E3779B97F4A7C15ull) >> 20) & mask_; }
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Texts llama.cpp recognises as end of generation (llama-vocab.cpp load()).
constexpr std::string_view kEogTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>",
    // fill-in-the-middle pad / repo / separator tokens
    "<|fim_pad|>", "<fim-pad>", "<PAD>", "<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
    "<|file_sep|>", "<fim-sep>", "<SEP>",
};
constexpr std::string_view kEotTexts[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<EOT>",
    "<｜end▁of▁sentence｜>",
};

}  // namespace

struct Tokenizer::Impl {
  enum class Kind { Bpe, Spm };
  Kind kind = Kind::Bpe;
  const PreTokenizerSpec* pre = nullptr;  // BPE only
  std::optional<RegexSplitter> splitter;  // BPE
  bool ignore_merges = false;
  bool add_space_prefix = false;          // SPM
  std::vector<float> scores;              // SPM; one per token
  std::array<int32_t, 256> byte_token{};  // SPM byte fallback: <0xNN> (or the byte itself), -1 if none
  // Piece texts back to back: pieces 0..n_vocab-1 are the tokens' raw texts,
  // later ones are merge parts and results that are not tokens.
  std::string arena;
  std::vector<uint32_t> piece_offsets{0};  // piece i is [offsets[i], offsets[i+1])
  int32_t n_tokens = 0;
  std::vector<TokenType> types;
  PieceTable piece_ids;              // text -> piece id (the token id when < n_vocab)
  MergeTable merges;
  std::array<int32_t, 256> byte_piece{};   // piece of each single mapped byte
  std::vector<int32_t> special_tokens;     // CONTROL | USER_DEFINED | UNKNOWN, longest first
  std::vector<int32_t> eog;
  std::vector<bool> is_eog;
  std::optional<int32_t> bos, eos, eot, unk;
  bool add_bos = false, add_eos = false;
  bool has_duplicate_tokens = false;

  int32_t n_vocab() const { return n_tokens; }
  std::string_view piece_text(int32_t piece) const {
    return std::string_view(arena).substr(piece_offsets[piece], piece_offsets[piece + 1] - piece_offsets[piece]);
  }
  int32_t append_piece(std::string_view text) {
    arena.append(text);
    if (arena.size() > UINT32_MAX) fail("vocabulary text too large");
    piece_offsets.push_back(static_cast<uint32_t>(arena.size()));
    return static_cast<int32_t>(piece_offsets.size() - 2);
  }
  // Piece id of text, or -1.
  int32_t find_piece(std::string_view text) const {
    const auto text_of = [this](int32_t id) { return piece_text(id); };
    return piece_ids.id_at(piece_ids.locate(text, PieceTable::hash(text), text_of));
  }
  // Maps text to piece `id`, or when id < 0 to its existing piece or a new one.
  // `text` must not point into the arena unless id >= 0.
  int32_t intern(std::string_view text, int32_t id = -1) { return intern_hashed(text, PieceTable::hash(text), id); }
  int32_t intern_hashed(std::string_view text, uint64_t hash, int32_t id) {
    const auto text_of = [this](int32_t piece) { return piece_text(piece); };
    if (piece_ids.needs_growth()) piece_ids.grow(text_of);
    const size_t slot = piece_ids.locate(text, hash, text_of);
    if (id < 0) {
      if (piece_ids.id_at(slot) >= 0) return piece_ids.id_at(slot);
      id = append_piece(text);
    } else if (piece_ids.id_at(slot) >= 0) {
      has_duplicate_tokens = true;
    }
    piece_ids.set(slot, hash, id);
    return id;
  }

  void encode_fragment(std::string_view text, std::vector<int32_t>& out) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out) const;
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
};

namespace {

std::string decode_normal_token(std::string_view text) {
  // llama_decode_text: each codepoint maps back to one byte; unknown ones are
  // spelled out as llama.cpp does.
  const auto& to_byte = byte_mapping().cpt_to_byte;
  std::string out;
  for (uint32_t cpt : unicode::decode_utf8(text)) {
    if (cpt < to_byte.size() && to_byte[cpt] >= 0) {
      out += static_cast<char>(to_byte[cpt]);
      continue;
    }
    std::string utf8;
    unicode::append_utf8(utf8, cpt);
    out += "[UNK_BYTE_0x";
    static constexpr char kHex[] = "0123456789abcdef";
    for (unsigned char c : utf8) {
      out += kHex[c >> 4];
      out += kHex[c & 15];
    }
    out += text;
    out += ']';
  }
  return out;
}

// SPM pieces spell spaces as U+2581.
constexpr std::string_view kSpmSpace = "\xe2\x96\x81";

std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0;;) {
    const size_t hit = text.find(from, pos);
    out.append(text.substr(pos, hit == std::string_view::npos ? std::string_view::npos : hit - pos));
    if (hit == std::string_view::npos) return out;
    out.append(to);
    pos = hit + from.size();
  }
}

// The byte of a <0xNN> token.
std::string byte_token_text(std::string_view text) {
  if (text.size() != 6 || text.substr(0, 3) != "<0x" || text[5] != '>') return {};
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int hi = hex(text[3]), lo = hex(text[4]);
  if (hi < 0 || lo < 0) return {};
  return std::string(1, static_cast<char>(hi * 16 + lo));
}

}  // namespace

Tokenizer Tokenizer::from_gguf(const gguf::File& file) { return build(view_of(file)); }

Tokenizer Tokenizer::from_vocabulary(const Vocabulary& vocab) { return build(view_of(vocab)); }

Tokenizer Tokenizer::build(const VocabularyView& v) {
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  if (v.model == "gpt2") {
    t.kind = Impl::Kind::Bpe;
    t.pre = find_pre_tokenizer(v.pre);
    if (!t.pre) fail("unknown tokenizer.ggml.pre '" + v.pre + "' (known: " + known_pre_tokenizers() + ")");
    t.ignore_merges = t.pre->ignore_merges;
    t.splitter.emplace(t.pre->regexes);
  } else if (v.model == "llama") {
    t.kind = Impl::Kind::Spm;
  } else {
    fail("unknown tokenizer.ggml.model '" + v.model + "' (known: gpt2, llama)");
  }
  const bool spm = t.kind == Impl::Kind::Spm;
  if (v.tokens.empty()) fail("tokenizer.ggml.tokens is empty");
  if (v.tokens.size() > static_cast<size_t>(INT32_MAX / 2)) fail("too many tokens");
  if (!v.types.empty() && v.types.size() != v.tokens.size()) {
    fail("tokenizer.ggml.token_type has " + std::to_string(v.types.size()) + " entries for " +
         std::to_string(v.tokens.size()) + " tokens");
  }
  if (!v.scores.empty() && v.scores.size() < v.tokens.size()) {
    fail("tokenizer.ggml.scores has " + std::to_string(v.scores.size()) + " entries for " +
         std::to_string(v.tokens.size()) + " tokens");
  }

  const size_t n = v.tokens.size();
  t.n_tokens = static_cast<int32_t>(n);
  size_t text_bytes = 0;
  for (std::string_view token : v.tokens) text_bytes += token.size();
  t.arena.reserve(text_bytes + text_bytes / 4);
  t.piece_offsets.reserve(n + n / 8);
  for (std::string_view token : v.tokens) t.append_piece(token);
  t.types.assign(n, TokenType::Normal);
  for (size_t i = 0; i < v.types.size(); ++i) {
    const auto raw = static_cast<int32_t>(v.types[i]);
    t.types[i] = (raw >= 0 && raw <= 6) ? v.types[i] : TokenType::Undefined;
  }

  // Like llama.cpp's token_to_id, the last of duplicate texts wins.
  t.piece_ids.reserve(n + n / 8);
  // The table is far larger than the caches: hashes are computed a block
  // ahead and their slots prefetched, so the misses overlap.
  constexpr size_t kBlock = 64;
  std::array<uint64_t, kBlock> hashes;
  for (size_t begin = 0; begin < n; begin += kBlock) {
    const size_t end = std::min(n, begin + kBlock);
    for (size_t i = begin; i < end; ++i) {
      hashes[i - begin] = PieceTable::hash(t.piece_text(static_cast<int32_t>(i)));
      t.piece_ids.prefetch(hashes[i - begin]);
    }
    for (size_t i = begin; i < end; ++i) {
      const auto id = static_cast<int32_t>(i);
      t.intern_hashed(t.piece_text(id), hashes[i - begin], id);
    }
  }

  if (spm) {
    t.scores.assign(n, 0.0f);
    std::copy_n(v.scores.begin(), v.scores.empty() ? 0 : n, t.scores.begin());
    // llama.cpp's byte_to_token: the <0xNN> token, else the byte's own text.
    for (uint32_t b = 0; b < 256; ++b) {
      static constexpr char kHex[] = "0123456789ABCDEF";
      const char name[6] = {'<', '0', 'x', kHex[b >> 4], kHex[b & 15], '>'};
      int32_t id = t.find_piece(std::string_view(name, 6));
      if (id < 0) {
        const char byte = static_cast<char>(b);
        id = t.find_piece(std::string_view(&byte, 1));
      }
      t.byte_token[b] = id >= 0 && id < t.n_vocab() ? id : -1;
    }
  } else {
    for (uint32_t b = 0; b < 256; ++b) t.byte_piece[b] = t.intern(byte_to_token_char(static_cast<uint8_t>(b)));
  }

  // Merges: rank = index; split at the first space after position 0; the
  // first occurrence of a pair keeps its rank. Lines without a split can never match.
  // Trained vocabularies usually list the result of merge r as token 256 + r;
  // that guess is checked and saves a lookup (only valid without duplicate texts).
  t.merges.reserve(spm ? 0 : v.merges.size());
  struct Split {
    std::string_view left, right;
    uint64_t left_hash, right_hash;
  };
  std::array<Split, kBlock> splits;
  std::string joined;
  const size_t n_merges = spm ? 0 : v.merges.size();
  for (size_t begin = 0; begin < n_merges; begin += kBlock) {
    const size_t end = std::min(n_merges, begin + kBlock);
    for (size_t rank = begin; rank < end; ++rank) {
      Split& split = splits[rank - begin];
      const std::string_view line = v.merges[rank];
      const size_t space = line.find(' ', 1);
      split.left = space == std::string_view::npos ? std::string_view() : line.substr(0, space);
      split.right = space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
      split.left_hash = PieceTable::hash(split.left);
      split.right_hash = PieceTable::hash(split.right);
      t.piece_ids.prefetch(split.left_hash);
      t.piece_ids.prefetch(split.right_hash);
    }
    std::array<std::pair<int32_t, int32_t>, kBlock> pairs;
    std::array<Merge, kBlock> block_merges;
    for (size_t rank = begin; rank < end; ++rank) {
      const Split& split = splits[rank - begin];
      pairs[rank - begin] = {-1, -1};
      if (split.left.empty() || split.right.empty()) continue;  // can never match a pair of symbols
      const int32_t left_piece = t.intern_hashed(split.left, split.left_hash, -1);
      const int32_t right_piece = t.intern_hashed(split.right, split.right_hash, -1);
      joined.assign(split.left);
      joined.append(split.right);
      const size_t guess = 256 + rank;
      const int32_t result = !t.has_duplicate_tokens && guess < n && t.piece_text(static_cast<int32_t>(guess)) == joined
                                 ? static_cast<int32_t>(guess)
                                 : t.intern(joined);
      pairs[rank - begin] = {left_piece, right_piece};
      block_merges[rank - begin] = Merge{static_cast<int32_t>(rank), result};
      t.merges.prefetch(left_piece, right_piece);
    }
    for (size_t rank = begin; rank < end; ++rank) {
      const auto [left_piece, right_piece] = pairs[rank - begin];
      if (left_piece >= 0) t.merges.insert_if_absent(left_piece, right_piece, block_merges[rank - begin]);
    }
  }

  const auto valid_id = [&](const std::optional<int64_t>& id) -> std::optional<int32_t> {
    if (id && *id >= 0 && *id < static_cast<int64_t>(n)) return static_cast<int32_t>(*id);
    return std::nullopt;
  };
  // llama.cpp's defaults unless the file names valid ids: gpt2 bos = eos = 11
  // (glm4: no bos); llama bos = 1, eos = 2, unk = 0. Defaults outside the
  // vocabulary are dropped.
  const auto default_id = [&](const std::optional<int64_t>& id, std::optional<int32_t> fallback) {
    if (auto valid = valid_id(id)) return valid;
    return fallback ? valid_id(*fallback) : std::nullopt;
  };
  const bool bos_null = !spm && t.pre->bos_null;
  t.bos = default_id(v.bos, spm ? 1 : bos_null ? std::optional<int32_t>() : 11);
  t.eos = default_id(v.eos, spm ? 2 : 11);
  t.unk = default_id(v.unk, spm ? std::optional<int32_t>(0) : std::nullopt);
  t.eot = valid_id(v.eot);
  const std::optional<int32_t> eom = valid_id(v.eom);
  // add_bos_token when present, else the default of the vocabulary type
  // (SPM: yes) or of the pre-tokenizer (llama-bpe: yes; qwen2, gpt-2: no).
  t.add_bos = v.add_bos.value_or(spm || t.pre->add_bos);
  t.add_eos = v.add_eos.value_or(false);
  t.add_space_prefix = spm && v.add_space_prefix.value_or(true);

  // End of generation, by text, plus eos/eot/eom. Such tokens are forced to
  // CONTROL as llama.cpp does.
  std::vector<int32_t> eog;
  const auto force_control = [&](int32_t id) { t.types[id] = TokenType::Control; };
  if (!t.eot) {
    for (std::string_view text : kEotTexts) {
      if (const int32_t id = t.find_piece(text); id >= 0 && id < t.n_vocab()) {
        t.eot = id;
        force_control(id);
        break;
      }
    }
  }
  for (std::string_view text : kEogTexts) {
    if (const int32_t id = t.find_piece(text); id >= 0 && id < t.n_vocab()) {
      eog.push_back(id);
      force_control(id);
    }
  }
  for (const auto& id : {t.eos, t.eot, eom}) {
    if (id) eog.push_back(*id);
  }
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  t.eog = eog;
  t.is_eog.assign(n, false);
  for (int32_t id : eog) t.is_eog[id] = true;

  // Special tokens are cut out of the text longest first (ties: lower id
  // first; llama.cpp's sort leaves that order unspecified).
  for (size_t i = 0; i < n; ++i) {
    const TokenType type = t.types[i];
    if ((type == TokenType::Control || type == TokenType::UserDefined || type == TokenType::Unknown) &&
        !t.piece_text(static_cast<int32_t>(i)).empty()) {
      t.special_tokens.push_back(static_cast<int32_t>(i));
    }
  }
  std::stable_sort(t.special_tokens.begin(), t.special_tokens.end(), [&](int32_t a, int32_t b) {
    return t.piece_text(a).size() > t.piece_text(b).size();
  });
  return Tokenizer(std::move(impl));
}

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

// BPE over one pre-tokenized word (raw UTF-8 bytes; the GPT-2 mapping is
// applied by starting from the byte pieces). Merges the pair with the lowest
// rank, leftmost first, until none applies.
void Tokenizer::Impl::encode_word(std::string_view word, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t piece;
    int32_t prev, next;  // -1 at the ends
    uint32_t length;     // bytes of the word covered; 0 once merged away
  };
  struct Candidate {
    int32_t rank;
    int32_t result;
    int32_t left;
    int32_t right;
    uint32_t left_length, right_length;  // to detect stale candidates
  };
  const auto later = [](const Candidate& a, const Candidate& b) {
    return a.rank > b.rank || (a.rank == b.rank && a.left > b.left);
  };

  if (ignore_merges) {
    // llama.cpp takes a word that is a whole token as it is.
    std::string mapped;
    for (char c : word) mapped += byte_to_token_char(static_cast<uint8_t>(c));
    if (const int32_t id = find_piece(mapped); id >= 0 && id < n_vocab()) {
      out.push_back(id);
      return;
    }
  }
  std::vector<Symbol> symbols(word.size());
  for (size_t i = 0; i < word.size(); ++i) {
    symbols[i] = Symbol{byte_piece[static_cast<uint8_t>(word[i])], static_cast<int32_t>(i) - 1,
                        i + 1 < word.size() ? static_cast<int32_t>(i + 1) : -1, 1};
  }
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(later)> queue(later);
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const Merge* merge = merges.find(symbols[left].piece, symbols[right].piece);
    if (!merge) return;
    queue.push(Candidate{merge->rank, merge->result, left, right, symbols[left].length, symbols[right].length});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);

  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    // Symbols only grow or vanish, so unchanged lengths mean unchanged text.
    if (left.length == 0 || right.length == 0 || left.length != c.left_length ||
        right.length != c.right_length || left.next != c.right) {
      continue;
    }
    left.piece = c.result;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }

  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const int32_t piece = symbols[i].piece;
    if (piece < n_vocab()) {
      out.push_back(piece);
      continue;
    }
    // Not a token: llama.cpp looks up each byte of the mapped text on its own
    // and drops those that are not tokens either.
    for (char byte : piece_text(piece)) {
      const int32_t id = find_piece(std::string_view(&byte, 1));
      if (id >= 0 && id < n_vocab()) out.push_back(id);
    }
  }
}

void Tokenizer::Impl::encode_fragment(std::string_view text, std::vector<int32_t>& out) const {
  for_each_word(*splitter, text, [&](std::string_view word) { encode_word(word, out); });
}

// SentencePiece BPE over one fragment (spaces already U+2581): start from
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is
// the token with the highest score (leftmost on ties), then spell pieces that
// are not tokens with byte tokens. As llama.cpp's llm_tokenizer_spm_session.
void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    int32_t prev, next;
    uint32_t offset, length;  // length 0 once merged away
  };
  struct Candidate {
    float score;
    int32_t left, right;
    uint32_t length;
  };
  const auto lower = [](const Candidate& a, const Candidate& b) {
    return a.score < b.score || (a.score == b.score && a.left > b.left);
  };
  std::vector<Symbol> symbols;
  symbols.reserve(text.size());
  for (size_t offset = 0; offset < text.size();) {
    // llama.cpp's unicode_len_utf8: by the lead byte's top bits, at most what is left.
    static constexpr uint8_t kLength[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    const size_t length = std::min<size_t>(kLength[static_cast<uint8_t>(text[offset]) >> 4], text.size() - offset);
    const auto index = static_cast<int32_t>(symbols.size());
    offset += length;
    symbols.push_back(Symbol{index - 1, offset == text.size() ? -1 : index + 1,
                             static_cast<uint32_t>(offset - length), static_cast<uint32_t>(length)});
  }
  std::priority_queue<Candidate, std::vector<Candidate>, decltype(lower)> queue(lower);
  const auto consider = [&](int32_t left, int32_t right) {
    if (left < 0 || right < 0) return;
    const uint32_t length = symbols[left].length + symbols[right].length;
    const int32_t id = find_piece(text.substr(symbols[left].offset, length));
    if (id < 0 || id >= n_vocab()) return;
    queue.push(Candidate{scores[id], left, right, length});
  };
  for (int32_t i = 1; i < static_cast<int32_t>(symbols.size()); ++i) consider(i - 1, i);
  while (!queue.empty()) {
    const Candidate c = queue.top();
    queue.pop();
    Symbol& left = symbols[c.left];
    Symbol& right = symbols[c.right];
    if (left.length == 0 || right.length == 0 || left.length + right.length != c.length) continue;
    left.length += right.length;
    right.length = 0;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = c.left;
    consider(left.prev, c.left);
    consider(c.left, left.next);
  }
  for (int32_t i = symbols.empty() ? -1 : 0; i >= 0; i = symbols[i].next) {
    const std::string_view piece = text.substr(symbols[i].offset, symbols[i].length);
    if (const int32_t id = find_piece(piece); id >= 0 && id < n_vocab()) {
      out.push_back(id);
      continue;
    }
    // Only single characters can be left without a token: byte fallback.
    for (char byte : piece) {
      if (const int32_t id = byte_token[static_cast<uint8_t>(byte)]; id >= 0) out.push_back(id);
      else if (unk) out.push_back(*unk);
    }
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  const Impl& t = *impl_;
  // Fragments: raw text ranges (token < 0) or special tokens, in order.
  struct Fragment {
    int32_t token;
    size_t offset, length;
  };
  std::vector<Fragment> fragments{{-1, 0, text.size()}};
  if (!text.empty()) {
    std::vector<Fragment> next;
    for (int32_t special : t.special_tokens) {
      const TokenType type = t.types[special];
      if (!parse_special && (type == TokenType::Control || type == TokenType::Unknown)) continue;
      const std::string_view needle = t.piece_text(special);
      // Quick reject: most special tokens do not occur at all.
      if (text.find(needle) == std::string_view::npos) continue;
      next.clear();
      for (const Fragment& f : fragments) {
        if (f.token >= 0) {
          next.push_back(f);
          continue;
        }
        size_t begin = f.offset;
        const size_t end = f.offset + f.length;
        while (begin < end) {
          const size_t match = text.substr(0, end).find(needle, begin);
          if (match == std::string_view::npos) break;
          if (match > begin) next.push_back({-1, begin, match - begin});
          next.push_back({special, match, needle.size()});
          begin = match + needle.size();
        }
        if (begin < end) next.push_back({-1, begin, end - begin});
      }
      fragments.swap(next);
    }
  }

  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  // SPM: a raw fragment at the start or after a special token gets the leading space.
  bool after_special = true;
  for (const Fragment& f : fragments) {
    if (f.token >= 0) {
      ids.push_back(f.token);
      after_special = true;
    } else if (f.length > 0) {
      if (t.kind == Impl::Kind::Spm) {
        std::string spm_text = t.add_space_prefix && after_special ? " " : "";
        spm_text.append(text.substr(f.offset, f.length));
        t.encode_spm(replace_all(spm_text, " ", kSpmSpace), ids);
      } else {
        t.encode_fragment(text.substr(f.offset, f.length), ids);
      }
      after_special = false;
    }
  }
  return ids;
}

std::string Tokenizer::token_text(int32_t id, bool special) const {
  const Impl& t = *impl_;
  if (id < 0 || id >= t.n_vocab()) throw std::out_of_range("token id " + std::to_string(id) + " out of range");
  const TokenType type = t.types[id];
  switch (type) {
    case TokenType::Normal:
      return t.kind == Impl::Kind::Spm ? replace_all(t.piece_text(id), kSpmSpace, " ")
                                       : decode_normal_token(t.piece_text(id));
    case TokenType::Byte: return byte_token_text(t.piece_text(id));
    case TokenType::UserDefined: return std::string(t.piece_text(id));
    case TokenType::Control:
    case TokenType::Unknown: return special ? std::string(t.piece_text(id)) : std::string();
    default: return {};  // UNUSED, UNDEFINED
  }
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool special) const {
  std::string out;
  for (int32_t id : ids) out += token_text(id, special);
  return out;
}

std::string_view Tokenizer::token_raw_text(int32_t id) const {
  if (id < 0 || id >= impl_->n_vocab()) throw std::out_of_range("token id " + std::to_string(id) + " out of range");
  return impl_->piece_text(id);
}

TokenType Tokenizer::token_type(int32_t id) const {
  if (id < 0 || id >= impl_->n_vocab()) throw std::out_of_range("token id " + std::to_string(id) + " out of range");
  return impl_->types[id];
}

std::optional<int32_t> Tokenizer::find_token(std::string_view raw_text) const {
  const int32_t id = impl_->find_piece(raw_text);
  if (id < 0 || id >= impl_->n_vocab()) return std::nullopt;
  return id;
}

bool Tokenizer::is_eog(int32_t id) const {
  return id >= 0 && id < impl_->n_vocab() && impl_->is_eog[id];
}
const std::vector<int32_t>& Tokenizer::eog_ids() const { return impl_->eog; }
int32_t Tokenizer::n_vocab() const { return impl_->n_vocab(); }
std::optional<int32_t> Tokenizer::bos() const { return impl_->bos; }
std::optional<int32_t> Tokenizer::eos() const { return impl_->eos; }
std::optional<int32_t> Tokenizer::eot() const { return impl_->eot; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::add_eos() const { return impl_->add_eos; }
std::optional<int32_t> Tokenizer::bos_to_add() const { return impl_->add_bos ? impl_->bos : std::nullopt; }

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text) const {
  std::vector<int32_t> ids;
  if (const auto bos = bos_to_add()) {
    ids.push_back(*bos);
    const std::string bos_text = token_text(*bos, /*special=*/true);
    if (!bos_text.empty() && text.substr(0, bos_text.size()) == bos_text) text.remove_prefix(bos_text.size());
  }
  std::vector<int32_t> body = encode(text, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}

}  // namespace lumen
