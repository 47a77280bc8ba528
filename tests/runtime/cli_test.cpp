// lumen-run end to end: a real model.so (emitted from the hand-written qwen2
// program) on the reference GGUF, and every refusal the issue lists: one
// line on stderr, exit 1 (runtime) or 2 (command line), never a crash or hang.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "lumen/codegen/codegen.h"
#include "lumen/gguf/gguf.h"
#include "lumen/runtime/session.h"
#include "lumen/text/chat.h"
#include "lumen/text/tokenizer.h"
#include "runtime_support.h"
#include "support/llama_cpp_reference.h"

namespace lumen::runtime {
namespace {

namespace fs = std::filesystem;

struct Result {
  int exit_code = -1;
  std::string out, err;
};

std::string quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) {
    if (c == '\'')
      q.append("'\\''");
    else
      q.push_back(c);
  }
  q.push_back('\'');
  return q;
}

class Cli : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    // One folder per process: ctest runs the tests of this suite in parallel.
    dir_ = fs::path(LUMEN_BINARY_DIR) / "tests" / "runtime" / "cli_test_files" / std::to_string(getpid());
    fs::create_directories(dir_);
    // lumen-run's packed-weight cache goes here, not into the user's cache.
    setenv("LUMEN_CACHE_DIR", (dir_ / "pack_cache").c_str(), 1);
    model_so_ = (dir_ / "qwen2.so").string();
    program::Program p = program::deserialize(testing::read_file(testing::qwen2_program_path()));
    codegen::emit_model_so(p, best_isa(cpu_features()), model_so_);
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs lumen-run with the arguments (each shell-quoted) and optional stdin text.
  static Result run(const std::vector<std::string>& args, const std::string& input = "") {
    std::string cmd = quote(LUMEN_BINARY_DIR "/tools/lumen-run");
    for (const std::string& a : args) cmd.append(" ").append(quote(a));
    const std::string out = (dir_ / "stdout.txt").string(), err = (dir_ / "stderr.txt").string();
    const std::string in = (dir_ / "stdin.txt").string();
    std::ofstream(in) << input;
    cmd.append(" <").append(quote(in)).append(" >").append(quote(out)).append(" 2>").append(quote(err));
    int status = std::system(cmd.c_str());
    Result r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = testing::read_file(out);
    r.err = testing::read_file(err);
    return r;
  }

  // A refusal: the given exit code and one line "lumen-run: error: ..." containing `what`.
  static void expect_error(const Result& r, int code, const std::string& what) {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.err.rfind("lumen-run: error: ", 0), 0u) << r.err;
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << "stderr: " << r.err << "wanted: " << what;
  }

  static std::string write_file(const std::string& name, const std::vector<uint8_t>& bytes) {
    std::string path = (dir_ / name).string();
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                static_cast<std::streamsize>(bytes.size()));
    return path;
  }

  static fs::path dir_;
  static std::string model_so_;
};

fs::path Cli::dir_;
std::string Cli::model_so_;

TEST_F(Cli, TokenizePrintsIds) {
  Result r = run({model_so_, "--gguf", testing::tiny_gguf(), "--tokenize", "Hello world"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "9707 1879\n");
  Result empty = run({model_so_, "--gguf", testing::tiny_gguf(), "--tokenize", ""});
  EXPECT_EQ(empty.exit_code, 0) << empty.err;
  EXPECT_EQ(empty.out, "");
}

TEST_F(Cli, DumpLogitsMatchesReference) {
  const test_support::LlamaCppPrompt ref = test_support::shared_qwen2_reference().at(1);
  const std::string dump = (dir_ / "logits.f32").string();
  Result r = run({model_so_, "--gguf", testing::tiny_gguf(), "--prompt", ref.text, "-n", "0", "--threads", "2",
                  "--dump-logits", dump});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("prompt " + std::to_string(ref.tokens.size()) + " tokens"), std::string::npos) << r.err;
  const std::vector<float> got = test_support::read_f32_file(dump);
  ASSERT_EQ(got.size(), ref.last_logits.size());
  test_support::expect_last_logits_match(got, ref, "--dump-logits");
}

TEST_F(Cli, GreedyGenerationIsReproducibleAndStops) {
  std::vector<std::string> args = {model_so_, "--gguf", testing::tiny_gguf(), "--prompt", "Hello world",
                                   "--temp", "0", "-n", "8", "--threads", "1"};
  Result a = run(args);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_FALSE(a.out.empty());
  args[args.size() - 1] = "3";
  Result b = run(args);
  EXPECT_EQ(b.exit_code, 0) << b.err;
  EXPECT_EQ(a.out, b.out) << "greedy output must not depend on threads";
  Result sampled1 = run({model_so_, "--gguf", testing::tiny_gguf(), "--prompt", "Hello", "-n", "6", "--seed", "7"});
  Result sampled2 = run({model_so_, "--gguf", testing::tiny_gguf(), "--prompt", "Hello", "-n", "6", "--seed", "7"});
  EXPECT_EQ(sampled1.exit_code, 0) << sampled1.err;
  EXPECT_EQ(sampled1.out, sampled2.out);
  // A stop string cuts the output before it.
  if (a.out.size() >= 4) {
    std::string stop = a.out.substr(2, 2);
    Result stopped = run({model_so_, "--gguf", testing::tiny_gguf(), "--prompt", "Hello world", "--temp", "0", "-n",
                          "8", "--stop", stop});
    EXPECT_EQ(stopped.exit_code, 0) << stopped.err;
    EXPECT_EQ(stopped.out.find(stop), std::string::npos);
    EXPECT_EQ(a.out.rfind(stopped.out, 0), 0u);
  }
}

// What lumen-run should do, computed in process: the ids of `text` as
// lumen-run encodes a prompt, and greedy generation of up to `n` tokens from
// the session's state (stopping at an end-of-generation token), as ids and text.
struct Greedy {
  std::vector<int32_t> ids;
  std::string text;
};
std::vector<int32_t> encode_prompt(const Tokenizer& tok, const std::string& text) {
  std::vector<int32_t> ids;
  if (const auto bos = tok.bos_to_add()) ids.push_back(*bos);
  const std::vector<int32_t> body = tok.encode(text, /*parse_special=*/true);
  ids.insert(ids.end(), body.begin(), body.end());
  return ids;
}
Greedy greedy(Session& session, const Tokenizer& tok, const std::vector<int32_t>& prompt, int n) {
  Greedy g;
  std::span<const float> logits = session.eval(prompt);
  for (int i = 0; i < n; ++i) {
    const int32_t next = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    if (tok.is_eog(next)) break;
    g.ids.push_back(next);
    g.text += tok.token_text(next);
    if (i + 1 < n) logits = session.eval(std::span<const int32_t>(&next, 1));
  }
  return g;
}

// --chat wraps the prompt in ChatML with the default system prompt: the
// prompt token count is that of chat_prompt(), and the text is the greedy
// continuation of those tokens. -i reads one user turn per line, prompts
// with "> " for each, prints one reply per turn, and keeps the conversation
// in the KV cache: turn 2 continues the context of turn 1 and its reply.
TEST_F(Cli, ChatAndInteractiveRun) {
  const gguf::File file = gguf::File::open(testing::tiny_gguf());
  const Tokenizer tok = Tokenizer::from_gguf(file);
  const std::shared_ptr<const CompiledModel> model = testing::qwen2_model();

  Result chat = run({model_so_, "--gguf", testing::tiny_gguf(), "--chat", "--prompt", "Hi", "-n", "4", "--temp", "0"});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const std::vector<int32_t> chat_ids = encode_prompt(tok, chat_prompt("Hi"));
  EXPECT_GT(chat_ids.size(), 20u);  // the system prompt is there
  EXPECT_NE(chat.err.find("prompt " + std::to_string(chat_ids.size()) + " tokens"), std::string::npos) << chat.err;
  {
    Session session(model, testing::tiny_gguf());
    EXPECT_EQ(chat.out, greedy(session, tok, chat_ids, 4).text);
  }

  Result interactive = run({model_so_, "--gguf", testing::tiny_gguf(), "-i", "-n", "3", "--temp", "0"},
                           "first question\nsecond question\n");
  ASSERT_EQ(interactive.exit_code, 0) << interactive.err;
  // Two turns, then end of input: three prompts, two replies of one line each.
  size_t prompts = 0;
  for (size_t at = interactive.err.find("> "); at != std::string::npos; at = interactive.err.find("> ", at + 2))
    ++prompts;
  EXPECT_EQ(prompts, 3u) << interactive.err;
  Session session(model, testing::tiny_gguf());
  ChatConversation conversation;
  const std::vector<int32_t> turn1 = encode_prompt(tok, conversation.add_user("first question"));
  const Greedy reply1 = greedy(session, tok, turn1, 3);
  conversation.add_assistant(reply1.text, /*im_end_in_context=*/false);
  if (reply1.ids.size() == 3)  // cut by -n: lumen-run evaluates the last token too, so the context holds the reply
    (void)session.eval(std::span<const int32_t>(&reply1.ids.back(), 1));
  const std::vector<int32_t> turn2 = encode_prompt(tok, conversation.add_user("second question"));
  const Greedy reply2 = greedy(session, tok, turn2, 3);
  EXPECT_EQ(interactive.out, reply1.text + "\n" + reply2.text + "\n");
  EXPECT_NE(interactive.err.find("prompt " + std::to_string(turn1.size() + turn2.size()) + " tokens"),
            std::string::npos)
      << interactive.err;
}

TEST_F(Cli, MissingOrUnreadableFiles) {
  expect_error(run({(dir_ / "absent.so").string(), "--gguf", testing::tiny_gguf(), "--prompt", "x"}), 1,
               "absent.so");
  expect_error(run({model_so_, "--gguf", (dir_ / "absent.gguf").string(), "--prompt", "x"}), 1, "absent.gguf");
  std::string garbage = write_file("garbage.so", std::vector<uint8_t>(100, 0x41));
  expect_error(run({garbage, "--gguf", testing::tiny_gguf(), "--prompt", "x"}), 1, "garbage.so");
  expect_error(run({model_so_, "--gguf", dir_.string(), "--prompt", "x"}), 1, "cli_test_files");
  expect_error(run({model_so_, "--gguf", testing::tiny_gguf(), "-f", (dir_ / "absent.txt").string()}), 1,
               "absent.txt");
}

TEST_F(Cli, TruncatedGguf) {
  std::string whole = testing::read_file(testing::tiny_gguf());
  std::string path = write_file("truncated.gguf", std::vector<uint8_t>(whole.begin(), whole.begin() + 1000000));
  expect_error(run({model_so_, "--gguf", path, "--prompt", "x"}), 1, "truncated.gguf");
}

TEST_F(Cli, GgufOfAnotherArchitecture) {
  gguf::Writer w;
  w.set_string("general.architecture", "llama");
  w.set_u32("llama.context_length", 16);
  std::string path = write_file("llama.gguf", w.to_bytes());
  expect_error(run({model_so_, "--gguf", path, "--prompt", "x"}), 1, "'llama'");
}

TEST_F(Cli, PromptLongerThanContext) {
  expect_error(run({model_so_, "--gguf", testing::tiny_gguf(), "--ctx", "4", "--prompt",
                    "one two three four five six seven", "-n", "0"}),
               1, "context");
  expect_error(run({model_so_, "--gguf", testing::tiny_gguf(), "--ctx", "8", "--prompt", "Hello world", "-n", "7"}),
               1, "context");
  expect_error(run({model_so_, "--gguf", testing::tiny_gguf(), "--ctx", "100000", "--prompt", "x"}), 1,
               "training context");
}

TEST_F(Cli, BadCommandLines) {
  const std::string gguf = testing::tiny_gguf();
  expect_error(run({model_so_, "--gguf", gguf, "--bogus"}), 2, "--bogus");
  expect_error(run({model_so_, "--gguf", gguf, "-n", "abc"}), 2, "abc");
  expect_error(run({model_so_, "--gguf", gguf, "-n", "-1"}), 2, "-1");
  expect_error(run({model_so_, "--gguf", gguf, "--threads", "0"}), 2, "threads");
  expect_error(run({model_so_, "--gguf", gguf, "--kv", "f8"}), 2, "f8");
  expect_error(run({model_so_, "--gguf", gguf, "--temp", "warm"}), 2, "warm");
  expect_error(run({model_so_}), 2, "--gguf");
  expect_error(run({model_so_, "--gguf", gguf, "--prompt", "a", "-f", "b"}), 2, "excludes");
  Result help = run({"--help"});
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("--gguf"), std::string::npos);
}

// A model.so for an ISA this CPU lacks is refused, naming the missing
// features. LUMEN_MAX_CPU_ISA makes this machine report an AVX2-only CPU.
TEST_F(Cli, ModelForAnotherIsa) {
  const std::string so = (dir_ / "vnni.so").string();
  program::Program p = program::deserialize(testing::read_file(testing::qwen2_program_path()));
  codegen::emit_model_so(p, Isa::Avx512Vnni, so);
  ASSERT_EQ(setenv("LUMEN_MAX_CPU_ISA", "avx2", 1), 0);
  Result r = run({so, "--gguf", testing::tiny_gguf(), "--prompt", "x"});
  unsetenv("LUMEN_MAX_CPU_ISA");
  expect_error(r, 1, "avx512f");
  EXPECT_NE(r.err.find("avx512_vnni"), std::string::npos) << r.err;
}

// A model.so of another ABI version is refused before anything else is read.
TEST_F(Cli, ModelOfAnotherAbiVersion) {
  const fs::path s = dir_ / "abi99.s";
  std::ofstream(s) << "  .text\n  .globl lumen_model_abi_version\n  .type lumen_model_abi_version,@function\n"
                      "lumen_model_abi_version:\n  movl $99, %eax\n  ret\n"
                      "  .globl lumen_model_get\n  .type lumen_model_get,@function\n"
                      "lumen_model_get:\n  xorl %eax, %eax\n  ret\n"
                      "  .section .note.GNU-stack,\"\",@progbits\n";
  const std::string so = (dir_ / "abi99.so").string();
  ASSERT_EQ(std::system(("cc -shared -nostdlib -o " + quote(so) + " " + quote(s.string())).c_str()), 0);
  expect_error(run({so, "--gguf", testing::tiny_gguf(), "--prompt", "x"}), 1, "ABI version 99");
  // Not a Lumen model at all: a shared object without the entry points.
  std::ofstream(s) << "  .text\n  .globl f\nf:\n  ret\n  .section .note.GNU-stack,\"\",@progbits\n";
  ASSERT_EQ(std::system(("cc -shared -nostdlib -o " + quote(so) + " " + quote(s.string())).c_str()), 0);
  expect_error(run({so, "--gguf", testing::tiny_gguf(), "--prompt", "x"}), 1, "not a Lumen model");
}

}  // namespace
}  // namespace lumen::runtime
