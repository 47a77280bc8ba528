// The pre-tokenizer table and the PCRE2 splitter.
//
// Each regex list below restates the pre_tokenizer of the model family's HF
// tokenizer.json as llama.cpp selects it for tokenizer.ggml.pre (the regex
// sets of llm_tokenizer_bpe in llama.cpp's src/llama-vocab.cpp). Where llama.cpp
// had to rewrite a regex for std::regex, the HF original is used instead,
// except that case-insensitive contractions stay ASCII ('[sS]): PCRE2's
// Unicode case folding would also match U+017F for 's'.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "lumen/text/pre_tokenizer.h"

#include <pcre2.h>

#include <stdexcept>
#include <string>
#include <vector>

namespace lumen {

namespace {

using R = std::string_view;

// GPT-2's split: contractions, letters, digits, other symbols, each with one
// optional leading space; whitespace runs leave their last space to the next word.
constexpr R kGpt2 = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Llama 3 (tiktoken cl100k style): any-case contractions, a letter run with
// one leading non-letter, digits in groups of up to 3, newlines kept apart.
constexpr R kLlama3 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen2: Llama 3's split with single digits.
constexpr R kQwen2 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Qwen3.5: Qwen2 with combining marks kept in letter runs.
constexpr R kQwen35 =
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// tiktoken o200k (GPT-4o, Llama 4): case-aware word runs with an optional contraction.
constexpr R kGpt4o =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// Mistral's tekken: o200k's word runs without contractions, single digits.
constexpr R kTekken =
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// DeepSeek V3 (also Hunyuan dense): digit groups of 3, CJK and kana runs, then
// an ASCII punctuation + letters word, letter/mark runs, symbol runs.
constexpr R kDeepseek3Main =
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// deepseek-llm: newlines; Latin/Greek/Cyrillic/... letter runs (the explicit
// ranges of DeepSeek's tokenizer.json) with one optional leading space;
// ASCII and full-width punctuation runs; trailing whitespace; CJK/Hangul runs; digits.
constexpr R kDeepseekLlm[] = {
    R"([\r\n])",
    R"(\s?[A-Za-z\x{B5}\x{C0}-\x{D6}\x{D8}-\x{F6}\x{F8}-\x{1BA}\x{1BC}-\x{1BF}\x{1C4}-\x{293}\x{295}-\x{2AF}\x{370}-\x{373}\x{376}\x{377}\x{37B}-\x{37D}\x{37F}\x{386}\x{388}-\x{38A}\x{38C}\x{38E}-\x{3A1}\x{3A3}-\x{3F5}\x{3F7}-\x{481}\x{48A}-\x{52F}\x{531}-\x{556}\x{10A0}-\x{10C5}\x{13A0}-\x{13F5}\x{13F8}-\x{13FD}\x{1C90}-\x{1CBA}\x{1CBD}-\x{1CBF}\x{1D00}-\x{1D2B}\x{1D6B}-\x{1D77}\x{1D79}-\x{1D9A}\x{1E00}-\x{1F15}\x{1F18}-\x{1F1D}\x{1F20}-\x{1F45}\x{1F48}-\x{1F4D}\x{1F50}-\x{1F57}\x{1F59}\x{1F5B}\x{1F5D}\x{1F5F}-\x{1F7D}\x{1F80}-\x{1FB4}\x{1FB6}-\x{1FBC}\x{1FBE}\x{1FC2}-\x{1FC4}\x{1FC6}-\x{1FCC}\x{1FD0}-\x{1FD3}\x{1FD6}-\x{1FDB}\x{1FE0}-\x{1FEC}\x{1FF2}-\x{1FF4}\x{1FF6}-\x{1FFC}\x{2102}\x{2107}\x{210A}-\x{2113}\x{2115}\x{2119}-\x{211D}\x{2124}\x{2126}\x{2128}\x{212A}-\x{212D}\x{212F}-\x{2134}\x{2139}\x{213C}-\x{213F}\x{2145}-\x{2149}\x{214E}\x{2183}\x{2184}\x{2C00}-\x{2C7B}\x{2C7E}-\x{2CE4}\x{2CEB}-\x{2CEE}\x{2CF2}\x{2CF3}\x{A640}-\x{A66D}\x{A680}-\x{A69B}\x{A722}-\x{A76F}\x{A771}-\x{A787}\x{A78B}-\x{A78E}\x{AB70}-\x{ABBF}\x{FB00}-\x{FB06}\x{FB13}-\x{FB17}\x{FF21}-\x{FF3A}\x{FF41}-\x{FF5A}\x{10400}-\x{1044F}\x{104B0}-\x{104D3}\x{104D8}-\x{104FB}\x{10C80}-\x{10CB2}\x{10CC0}-\x{10CF2}\x{118A0}-\x{118DF}\x{1E900}-\x{1E943}]+)",
    R"(\s?[!-/:-~\x{FF01}-\x{FF0F}\x{FF1A}-\x{FF5E}\x{2018}-\x{201F}\x{3000}-\x{3002}]+)",
    R"(\s+$)",
    R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)",
    R"(\p{N}+)",
};
// deepseek-coder: newlines, letter runs, punctuation runs (each with one
// optional leading whitespace), CJK/Hangul runs, single digits.
constexpr R kDeepseekCoder[] = {
    R"([\r\n])", R"(\s?\p{L}+)", R"(\s?\p{P}+)", R"([\x{4E00}-\x{9FA5}\x{800}-\x{4E00}\x{AC00}-\x{D7FF}]+)", R"(\p{N})",
};
// deepseek-v3 and hunyuan-dense.
constexpr R kDeepseek3[] = {R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)", kDeepseek3Main};
// Falcon: punctuation runs first, then GPT-2's split, then digits in threes.
constexpr R kFalcon[] = {R"([\p{P}\$\+<=>\^~\|`]+)", kGpt2, R"([0-9][0-9][0-9])"};
// StarCoder, Refact, Command-R, SmolLM and others: single digits, then GPT-2's split.
constexpr R kStarcoder[] = {R"(\p{N})", kGpt2};
// GPT-2, MPT, OLMo, Phi-2, ...
constexpr R kGpt2List[] = {kGpt2};
constexpr R kLlama3List[] = {kLlama3};
constexpr R kQwen2List[] = {kQwen2};
constexpr R kQwen35List[] = {kQwen35};
constexpr R kGpt4oList[] = {kGpt4o};
constexpr R kTekkenList[] = {kTekken};
// llama.cpp's regexes for a BPE file without tokenizer.ggml.pre.
constexpr R kDefault[] = {R"([\p{P}\$\+<=>\^~\|]+)", kGpt2, R"(\p{N}+)", R"([0-9][0-9][0-9])"};
// BLOOM, Poro, GPT-3 Finnish: a word is everything up to whitespace or ASCII/CJK/Indic/Arabic punctuation.
constexpr R kBloom[] = {R"( ?[^(\s|.,!?…。，、।۔،)]+)"};
// Viking: BLOOM's split, then single digits.
constexpr R kViking[] = {R"( ?[^(\s|.,!?…。，、।۔،)]+)", R"(\p{N})"};
// Chameleon: sentinel and image tokens, tabs/newlines/space pairs, digits, punctuation, GPT-2.
constexpr R kChameleon[] = {
    R"(<sentinel:[0-9]+>)", R"((IMGIMG)((A|B|C|D|E|F|G|H|I){1,4})Z)", R"(([\t\n]|    |  ))", R"(\p{N})",
    R"([\p{P}!-/:-@\[-`{-~])", kGpt2,
};
// Bailing MoE (Ling): Qwen2-like with possessive quantifiers and single newlines.
constexpr R kBailing[] = {
    R"('(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s*[\r\n]|\s+(?!\S)|\s+)",
};
// Seed-Coder: Qwen2 without newlines in symbol runs.
constexpr R kSeedCoder[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1}| ?[^\s\p{L}\p{N}\r\n]+|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// ufakzeka: Qwen2 without contractions (Turkish apostrophe suffixes stay on the word).
constexpr R kUfakzeka[] = {
    R"([^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// MiniCPM5: digit groups of 3, then Qwen2 with digit runs.
constexpr R kMiniCpm5[] = {
    R"(\p{N}{1,3})",
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}+| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// Laguna: lines first, then Qwen2.
constexpr R kLaguna[] = {R"([^\n]+|[\n]+)", kQwen2};
// EXAONE MoE: letter runs may contain single spaces between letters.
constexpr R kExaoneMoe[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?(?:\p{L}\p{M}*(?: \p{L}\p{M}*)*)+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]?|\s*[\r\n]|\s+(?!\S)|\s+)",
};
// Tiny Aya / Cohere2 MoE: digits grouped in threes from the right, then o200k.
constexpr R kTinyAya[] = {R"(\d{1,3}(?=(?:\d{3})*\b))", kGpt4o};
// SuperBPE: digit runs, then cuts every three digits from the right.
constexpr R kSuperBpe[] = {R"(\p{N}+)", R"((?=(\d{3})+(?!\d)))"};

// Youtu: Hangul, CJK punctuation, Bopomofo and CJK/kana runs first, then o200k-style words with single digits.
constexpr R kYoutu[] = {
    R"([\x{AC00}-\x{D7A3}\x{3131}-\x{318E}]+|[\x{FF01}\x{2026}\x{201C}\x{201D}\x{2018}\x{2019}\x{2014}\x{FF1A}\x{FF1B}\x{FF0C}\x{3001}-\x{303F}\x{FE30}-\x{FE4F}]+|[\x{3105}-\x{312F}]+|[\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+)",
};
// Spark 2.5: DeepSeek V3's split without newline runs, then single digits.
constexpr R kSpark25[] = {
    R"(\p{N}{1,3})", R"([\x{4E00}-\x{9FA5}\x{3040}-\x{309F}\x{30A0}-\x{30FF}]+)",
    R"([!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+|[\r\n]|\s+(?!\S)|\s+)",
    R"(\p{N})",
};
// Jais 2: Llama 3's split with whitespace runs cut into power-of-two lengths.
constexpr R kJais2[] = {
    R"((?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s{512}(?!\S)|\s{256}(?!\S)|\s{128}(?!\S)|\s{64}(?!\S)|\s{32}(?!\S)|\s{16}(?!\S)|\s{8}(?!\S)|\s{4}(?!\S)|\s{1,2}(?!\S)|\s{1})",
};

// tokenizer.ggml.pre -> regexes, in llama.cpp's load() order. Names that
// llama.cpp reads but whose tokenizers are not regex splits (kimi-k2, afmoe,
// gemma4, sarvam-moe, whitespace) are not listed and so are rejected.
constexpr PreTokenizerSpec kPreTokenizers[] = {
    {"default", kDefault},
    // Llama 3 and models trained on its tokenizer: BOS by default, whole-word tokens skip merges.
    {"llama3", kLlama3List, true, true},
    {"llama-v3", kLlama3List, true, true},
    {"llama-bpe", kLlama3List, true, true},
    {"falcon3", kLlama3List, true, true},
    {"falcon-h1", kLlama3List, true, true},
    {"pixtral", kLlama3List, true, true},
    {"midm-2.0", kLlama3List, true, true},
    {"lfm2", kLlama3List, true, true},
    {"jina-v5-nano", kLlama3List, true, true},
    {"deepseek-llm", kDeepseekLlm},
    {"deepseek-coder", kDeepseekCoder},
    {"deepseek-v3", kDeepseek3},
    {"falcon", kFalcon},
    {"mpt", kGpt2List},
    {"starcoder", kStarcoder},
    // GPT-2 family.
    {"gpt-2", kGpt2List},
    {"phi-2", kGpt2List},
    {"jina-es", kGpt2List},
    {"jina-de", kGpt2List},
    {"gigachat", kGpt2List},
    {"jina-v2-es", kGpt2List},
    {"jina-v2-de", kGpt2List},
    {"a.x-4.0", kGpt2List},
    {"mellum", kGpt2List},
    {"modern-bert", kGpt2List},
    {"jina-v1-en", kGpt2List},
    {"jina-v2-code", kGpt2List},
    {"roberta-bpe", kGpt2List},
    {"refact", kStarcoder},
    {"command-r", kStarcoder},
    // Qwen2 family; no BOS.
    {"qwen2", kQwen2List},
    {"deepseek-r1-qwen", kQwen2List},
    {"kormo", kQwen2List},
    {"f2llmv2", kQwen2List},
    {"qwen35", kQwen35List},
    {"stablelm2", kQwen2List},
    {"olmo", kGpt2List},
    {"dbrx", kLlama3List},
    {"smaug-bpe", kLlama3List},
    {"poro-chat", kBloom},
    {"glm4", kLlama3List, false, false, true},
    {"chatglm-bpe", kLlama3List, false, false, true},
    {"viking", kViking},
    {"jais", kGpt2List},
    {"tekken", kTekkenList, true, true},
    {"smollm", kStarcoder},
    {"codeshell", kStarcoder},
    {"bloom", kBloom},
    {"gpt3-finnish", kBloom},
    {"exaone", kStarcoder},
    {"exaone4", kGpt2List},
    {"exaone-moe", kExaoneMoe},
    {"chameleon", kChameleon, false, true},
    {"minerva-7b", kStarcoder},
    {"megrez", kQwen2List},
    {"gpt-4o", kGpt4oList},
    {"llama4", kGpt4oList},
    {"kanana2", kGpt4oList},
    {"talkie", kGpt4oList},
    {"minimax-m2", kGpt4oList},
    {"tiny_aya", kTinyAya},
    {"cohere2moe", kTinyAya},
    {"superbpe", kSuperBpe},
    {"trillion", kGpt2List},
    {"granite-docling", kGpt2List},
    {"bailingmoe", kBailing},
    {"bailingmoe2", kBailing},
    {"llada-moe", kBailing},
    {"seed-coder", kSeedCoder},
    {"hunyuan", kQwen2List},
    {"hunyuan-dense", kDeepseek3},
    {"hy_v4", kDeepseek3},
    {"joyai-llm", kDeepseek3},
    {"ufakzeka", kUfakzeka},
    {"grok-2", kQwen2List},
    {"solar-open", kQwen2List},
    {"mellum2", kStarcoder},
    {"minicpm5", kMiniCpm5, true},
    {"laguna", kLaguna},
    {"youtu", kYoutu, true},
    {"spark2_5", kSpark25},
    {"jais-2", kJais2},
};

}  // namespace

const PreTokenizerSpec* find_pre_tokenizer(std::string_view name) {
  if (name.empty()) name = "default";
  for (const PreTokenizerSpec& spec : kPreTokenizers) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

std::string known_pre_tokenizers() {
  std::string names;
  for (const PreTokenizerSpec& spec : kPreTokenizers) {
    if (!names.empty()) names += ", ";
    names += spec.name;
  }
  return names;
}

// ---------------------------------------------------------------------------
// RegexSplitter

namespace {

// Per-thread match state: PCRE2 match data and a JIT stack large enough for
// long whitespace runs under (?!\S) backtracking.
struct MatchState {
  pcre2_match_data* data = nullptr;
  pcre2_jit_stack* stack = nullptr;
  pcre2_match_context* context = nullptr;
  MatchState() {
    data = pcre2_match_data_create(32, nullptr);
    stack = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    context = pcre2_match_context_create(nullptr);
    if (!data || !stack || !context) throw std::bad_alloc();
    pcre2_jit_stack_assign(context, nullptr, stack);
  }
  ~MatchState() {
    pcre2_match_context_free(context);
    pcre2_jit_stack_free(stack);
    pcre2_match_data_free(data);
  }
  MatchState(const MatchState&) = delete;
  MatchState& operator=(const MatchState&) = delete;
};

MatchState& match_state() {
  thread_local MatchState state;
  return state;
}

size_t utf8_char_length(unsigned char lead) {
  if (lead < 0xC0) return 1;
  if (lead < 0xE0) return 2;
  if (lead < 0xF0) return 3;
  return 4;
}

}  // namespace

struct RegexSplitter::Impl {
  std::vector<pcre2_code*> codes;
  ~Impl() {
    for (pcre2_code* code : codes) pcre2_code_free(code);
  }
};

RegexSplitter::RegexSplitter(std::span<const std::string_view> regexes) : impl_(std::make_unique<Impl>()) {
  for (std::string_view regex : regexes) {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(regex.data()), regex.size(),
                                     PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK, &error, &error_offset, nullptr);
    if (!code) {
      PCRE2_UCHAR message[256];
      pcre2_get_error_message(error, message, sizeof(message));
      throw std::runtime_error("tokenizer: bad pre-tokenizer regex at offset " + std::to_string(error_offset) + ": " +
                               reinterpret_cast<const char*>(message));
    }
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // without JIT support the interpreter runs
    impl_->codes.push_back(code);
  }
}

RegexSplitter::RegexSplitter(RegexSplitter&&) noexcept = default;
RegexSplitter& RegexSplitter::operator=(RegexSplitter&&) noexcept = default;
RegexSplitter::~RegexSplitter() = default;

std::vector<std::pair<size_t, size_t>> RegexSplitter::split(std::string_view text) const {
  std::vector<std::pair<size_t, size_t>> pieces;
  if (text.empty()) return pieces;
  pieces.emplace_back(0, text.size());
  MatchState& state = match_state();
  std::vector<std::pair<size_t, size_t>> next;
  for (pcre2_code* code : impl_->codes) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const auto& [offset, length] : pieces) {
      const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data() + offset);
      size_t emitted = 0;  // start of the text not yet in a word
      size_t pos = 0;
      while (pos <= length) {
        const int rc = pcre2_match(code, subject, length, pos, PCRE2_NO_UTF_CHECK, state.data, state.context);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
          PCRE2_UCHAR message[256];
          pcre2_get_error_message(rc, message, sizeof(message));
          throw std::runtime_error(std::string("tokenizer: pre-tokenizer regex failed: ") +
                                   reinterpret_cast<const char*>(message));
        }
        const PCRE2_SIZE* ovector = pcre2_get_ovector_pointer(state.data);
        const size_t begin = ovector[0], end = ovector[1];
        if (begin > emitted) next.emplace_back(offset + emitted, begin - emitted);
        if (end > begin) {
          next.emplace_back(offset + begin, end - begin);
          emitted = end;
          pos = end;
        } else {
          // An empty match only marks a cut; search again one character on.
          if (begin > emitted) emitted = begin;
          if (begin >= length) break;
          pos = begin + utf8_char_length(static_cast<unsigned char>(text[offset + begin]));
        }
      }
      if (emitted < length) next.emplace_back(offset + emitted, length - emitted);
    }
    pieces.swap(next);
  }
  return pieces;
}

}  // namespace lumen
