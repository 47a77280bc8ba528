// ChatTemplate::from_gguf: the template of a GGUF with its bos/eos texts. Kept
// apart from the interpreter, which needs neither the GGUF reader nor the
// tokenizer (the fuzz target builds the interpreter alone).
#include "lumen/gguf/gguf.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"

namespace lumen::chat {

std::optional<ChatTemplate> ChatTemplate::from_gguf(const gguf::File& file, const std::optional<std::string>& override) {
  std::optional<std::string> source = override ? override : file.get_string("tokenizer.chat_template");
  if (!source) return std::nullopt;
  ChatTemplate t(*source);
  // bos/eos texts as llama.cpp gives them to templates (the token's text with
  // special tokens rendered).
  std::string bos, eos;
  if (file.find("tokenizer.ggml.tokens")) {
    const Tokenizer tok = Tokenizer::from_gguf(file);
    if (auto id = tok.bos(); id && *id >= 0 && *id < tok.n_vocab()) bos = tok.token_text(*id, true);
    if (auto id = tok.eos(); id && *id >= 0 && *id < tok.n_vocab()) eos = tok.token_text(*id, true);
  }
  t.set_special_tokens(std::move(bos), std::move(eos));
  return t;
}

}  // namespace lumen::chat
