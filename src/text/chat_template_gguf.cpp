// ChatTemplate::from_gguf: the template of a GGUF with its bos/eos texts. Kept
// apart from the interpreter, which needs neither the GGUF reader nor the
// tokenizer (the fuzz target builds the interpreter alone).
#include <fstream>
#include <sstream>
#include <stdexcept>

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

ChatTemplate load_chat_template(const gguf::File& file, const std::string& gguf_name,
                                const std::optional<std::string>& template_file, bool* used_chatml) {
  std::optional<std::string> source;
  std::string name = gguf_name + ":tokenizer.chat_template";
  if (template_file) {
    std::ifstream in(*template_file, std::ios::binary);
    if (!in) throw std::runtime_error("cannot read chat template '" + *template_file + "'");
    std::stringstream text;
    text << in.rdbuf();
    source = text.str();
    name = *template_file;
  }
  if (used_chatml != nullptr) *used_chatml = false;
  try {
    if (auto t = ChatTemplate::from_gguf(file, source)) return std::move(*t);
  } catch (const TemplateError& e) {
    throw std::runtime_error(name + ":" + std::to_string(e.line()) + ":" + std::to_string(e.column()) + ": " +
                             e.message());
  }
  if (used_chatml != nullptr) *used_chatml = true;
  return ChatTemplate::chatml();
}

}  // namespace lumen::chat
