// lumen-run end to end: a real model.so (emitted from the hand-written qwen2
// program) on the reference GGUF, and every refusal the issue lists: one
// line on stderr, exit 1 (runtime) or 2 (command line), never a crash or hang.
// The flags lumen-run, lumen-bench and lumen-server share (tools/cli) are
// checked here once for all three.
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
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "cli/sampler_flags.h"
#include "cli/session_flags.h"
#include "lumen/codegen/codegen.h"
#include "lumen/gguf/gguf.h"
#include "lumen/common/cache.h"
#include "lumen/runtime/pack_cache.h"
#include "lumen/runtime/sampler.h"
#include "lumen/runtime/session.h"
#include "lumen/text/chat_template.h"
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
    codegen::emit_model_so(testing::qwen2_program(best_isa(cpu_features())), best_isa(cpu_features()), host_cpu_tune(), model_so_);
  }

  static void TearDownTestSuite() {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Runs lumen-run with the arguments (each shell-quoted) and optional stdin text.
  static Result run(const std::vector<std::string>& args, const std::string& input = "") {
    return run_tool("lumen-run", args, input);
  }

  // Runs the tool (lumen-run, lumen-bench or lumen-server) likewise.
  static Result run_tool(const std::string& tool, const std::vector<std::string>& args, const std::string& input = "") {
    std::string cmd = quote(LUMEN_BINARY_DIR "/tools/" + tool);
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

  // A refusal: the given exit code and one line "TOOL: error: ..." containing `what`.
  static void expect_error(const Result& r, int code, const std::string& what, const std::string& tool = "lumen-run") {
    EXPECT_EQ(r.exit_code, code) << r.err;
    EXPECT_EQ(r.err.rfind(tool + ": error: ", 0), 0u) << r.err;
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

// --chat renders the prompt with the GGUF's chat template (Qwen's: it adds
// the default system prompt): the prompt token count is that of the render,
// and the text is the greedy continuation of those tokens. -i reads one user
// turn per line, prompts with "> " for each, prints one reply per turn, and
// keeps the conversation in the KV cache: turn 2 evaluates only what the
// render of the whole conversation adds to turn 1 and its reply.
TEST_F(Cli, ChatAndInteractiveRun) {
  const gguf::File file = gguf::File::open(testing::tiny_gguf());
  const Tokenizer tok = Tokenizer::from_gguf(file);
  const std::shared_ptr<const CompiledModel> model = testing::qwen2_model();
  bool used_chatml = false;
  const chat::ChatTemplate tmpl = chat::load_chat_template(file, testing::tiny_gguf(), std::nullopt, &used_chatml);
  ASSERT_FALSE(used_chatml);

  Result chat = run({model_so_, "--gguf", testing::tiny_gguf(), "--chat", "--prompt", "Hi", "-n", "4", "--temp", "0"});
  ASSERT_EQ(chat.exit_code, 0) << chat.err;
  const std::vector<int32_t> chat_ids = encode_prompt(tok, chat::render_chat(tmpl, {{"user", "Hi"}}, true));
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
  std::vector<chat::Message> messages{{"user", "first question"}};
  const std::string render1 = chat::render_chat(tmpl, messages, true);
  const std::vector<int32_t> turn1 = encode_prompt(tok, render1);
  const Greedy reply1 = greedy(session, tok, turn1, 3);
  if (reply1.ids.size() == 3)  // cut by -n: lumen-run evaluates the last token too, so the context holds the reply
    (void)session.eval(std::span<const int32_t>(&reply1.ids.back(), 1));
  messages.push_back({"assistant", reply1.text});
  messages.push_back({"user", "second question"});
  const std::string render2 = chat::render_chat(tmpl, messages, true);
  const std::string fed = render1 + reply1.text;
  ASSERT_EQ(render2.compare(0, fed.size(), fed), 0) << "the template rewrites history";
  const std::vector<int32_t> turn2 = tok.encode(render2.substr(fed.size()), /*parse_special=*/true);
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
  // An unsupported cache type: one line naming the flag and the accepted types.
  for (const char* bad : {"q4_0", "foo"}) {
    Result r = run({model_so_, "--gguf", gguf, "--kv", bad});
    expect_error(r, 2, "--kv");
    EXPECT_NE(r.err.find("f16"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("q8_0"), std::string::npos) << r.err;
  }
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
  codegen::emit_model_so(testing::qwen2_program(Isa::Avx512Vnni), Isa::Avx512Vnni, CpuTune::Generic, so);
  ASSERT_EQ(setenv("LUMEN_MAX_CPU_ISA", "avx2", 1), 0);
  Result r = run({so, "--gguf", testing::tiny_gguf(), "--prompt", "x"});
  unsetenv("LUMEN_MAX_CPU_ISA");
  expect_error(r, 1, "avx512f");
  EXPECT_NE(r.err.find("avx512_vnni"), std::string::npos) << r.err;
}

// A kernel table entry whose GEMM tile the model's ISA cannot hold is
// refused at load, not run as another kernel: an AVX2 model.so whose
// gemm.bias.m16n4 entry is renamed gemm.bias.m48n4.
TEST_F(Cli, ModelWithAKernelItsIsaCannotHold) {
  const std::string so = (dir_ / "avx2-m48n4.so").string();
  codegen::emit_model_so(testing::qwen2_program(Isa::Avx2), Isa::Avx2, CpuTune::Generic, so);
  std::string bytes = testing::read_file(so);
  const std::string name("gemm.bias.m16n4\0", 16);  // the table's name string, not the program text's
  const size_t at = bytes.find(name);
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, name.size(), std::string("gemm.bias.m48n4\0", 16));
  std::ofstream(so, std::ios::binary | std::ios::trunc) << bytes;
  expect_error(run({so, "--gguf", testing::tiny_gguf(), "--prompt", "x"}), 1,
               "'gemm.bias.m48n4': the tile does not fit the registers of avx2");
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

// Every shared Session flag with a bad value, in every tool that takes it:
// exit 2 and one line naming the flag. The GGUF is given as -m (llama.cpp's
// spelling), so a refusal that names the bad flag, not a missing --gguf,
// also shows that each tool takes -m.
TEST_F(Cli, SharedSessionFlagsRefuseBadValuesInEveryTool) {
  struct Case {
    std::vector<std::string> args;
    std::string flag;
    std::vector<std::string> tools;
  };
  const std::vector<std::string> all = {"lumen-run", "lumen-bench", "lumen-server"};
  const std::vector<std::string> sized = {"lumen-run", "lumen-server"};  // lumen-bench sizes them from -p and -n
  const std::vector<Case> cases = {
      {{"--ctx", "0"}, "--ctx", sized},
      {{"-c", "abc"}, "--ctx", sized},
      {{"--ctx-size", "2000000000"}, "--ctx", sized},
      {{"--batch", "0"}, "--batch", sized},
      {{"-b", "x"}, "--batch", sized},
      {{"--threads", "0"}, "--threads", all},
      {{"-t", "1025"}, "--threads", all},
      {{"-t", "two"}, "--threads", all},
      {{"--kv", "f8"}, "--kv", all},
      {{"--kv", "q4_0"}, "--kv", all},
      {{"--no-pack-cache=maybe"}, "--no-pack-cache", all},
      {{"--pack-cache-read=maybe"}, "--pack-cache-read", all},
  };
  for (const Case& c : cases)
    for (const std::string& tool : c.tools) {
      SCOPED_TRACE(tool + " " + c.args[0]);
      std::vector<std::string> args = {model_so_, "-m", testing::tiny_gguf()};
      args.insert(args.end(), c.args.begin(), c.args.end());
      expect_error(run_tool(tool, args), 2, c.flag, tool);
    }
  for (const std::string& tool : all) expect_error(run_tool(tool, {model_so_}), 2, "--gguf is required", tool);
  // lumen-bench takes a list of thread counts, as llama-bench; the others one count.
  expect_error(run_tool("lumen-bench", {model_so_, "-m", testing::tiny_gguf(), "-t", "1,0"}), 2, "--threads",
               "lumen-bench");
  expect_error(run({model_so_, "-m", testing::tiny_gguf(), "-t", "1,2"}), 2, "--threads");
  // A sampler flag out of its table range (the server's JSON fields share it: http_test).
  expect_error(run({model_so_, "-m", testing::tiny_gguf(), "--top-p", "2"}), 2, "--top-p");
}

// llama.cpp's spellings (-m, -c, -b, -t, -p, -n, -s) run what the long names run.
TEST_F(Cli, LlamaCppSpellingsRunWhatTheLongNamesRun) {
  const std::string gguf = testing::tiny_gguf();
  Result long_names = run({model_so_, "--gguf", gguf, "--ctx", "64", "--batch", "2", "--threads", "1", "--prompt",
                           "Hello world", "--n-predict", "4", "--temp", "0.7", "--top-k", "5", "--top-p", "0.9",
                           "--min-p", "0.1", "--seed", "3"});
  Result short_names = run({model_so_, "-m", gguf, "-c", "64", "-b", "2", "-t", "1", "-p", "Hello world", "-n", "4",
                            "--temp", "0.7", "--top-k", "5", "--top-p", "0.9", "--min-p", "0.1", "-s", "3"});
  ASSERT_EQ(long_names.exit_code, 0) << long_names.err;
  ASSERT_EQ(short_names.exit_code, 0) << short_names.err;
  EXPECT_FALSE(short_names.out.empty());
  EXPECT_EQ(short_names.out, long_names.out);
  EXPECT_NE(short_names.err.find("1 threads"), std::string::npos) << short_names.err;
  EXPECT_NE(short_names.err.find("seed 3"), std::string::npos) << short_names.err;
}

// The shared flags parsed in process: the Session options they give, and
// the defaults when they are absent (the runtime's own defaults).
TEST(SessionFlags, GiveTheSessionOptions) {
  cli::SessionFlags given;
  CLI::App app{"session flags", "test"};
  cli::add_session_flags(app, given);
  app.parse("-m x.gguf -c 64 -b 16 -t 3 --kv f32 --no-pack-cache", /*program_name_included=*/false);
  EXPECT_EQ(given.gguf_path, "x.gguf");
  const SessionOptions o = given.session_options(given.n_threads());
  EXPECT_EQ(o.n_ctx, 64);
  EXPECT_EQ(o.n_batch, 16);
  EXPECT_EQ(o.n_threads, 3);
  EXPECT_EQ(o.kv_type, KvType::F32);
  EXPECT_EQ(o.pack_cache_dir, "");
  EXPECT_TRUE(o.map_pack_cache);

  cli::SessionFlags absent;
  CLI::App defaults{"session flags", "test"};
  cli::add_session_flags(defaults, absent);
  defaults.parse("--gguf x.gguf --pack-cache-read", false);
  const SessionOptions d = absent.session_options(absent.n_threads());
  const SessionOptions runtime_defaults;
  EXPECT_EQ(d.n_ctx, runtime_defaults.n_ctx);
  EXPECT_EQ(d.n_batch, runtime_defaults.n_batch);
  EXPECT_EQ(d.n_threads, runtime_defaults.n_threads);
  EXPECT_EQ(d.kv_type, runtime_defaults.kv_type);
  EXPECT_EQ(d.pack_cache_dir, lumen::cache_dir());
  EXPECT_FALSE(d.map_pack_cache);

  cli::SessionFlags bench;
  CLI::App bench_app{"session flags", "test"};
  cli::add_session_flags(bench_app, bench, {.ctx_and_batch = false, .thread_list = true});
  bench_app.parse("-m x.gguf -t 1,2,4", false);
  EXPECT_EQ(bench.threads, (std::vector<int>{1, 2, 4}));
  EXPECT_THROW(bench_app.parse("-m x.gguf -c 64", false), CLI::ParseError);
}

TEST(KvType, NamesRoundTrip) {
  for (const std::string_view name : kKvTypeNames) EXPECT_EQ(to_string(*parse_kv_type(name)), name);
  EXPECT_FALSE(parse_kv_type("f8").has_value());
}

// The sampler flags come from kSamplerParams: each sets its SamplerParams
// field and refuses a value above its range, naming the flag (the seed takes
// every 64-bit integer, and CLI11 saturates larger ones, so it has no value
// above its range).
TEST(SamplerFlags, FollowTheSamplerTable) {
  for (const SamplerParam& p : kSamplerParams) {
    const std::string flags(p.flags);
    const std::string name = flags.substr(flags.rfind(',') + 1);  // the long name
    SCOPED_TRACE(name);
    SamplerParams params;
    CLI::App app{"sampler flags", "test"};
    cli::add_sampler_flags(app, params);
    std::string above;
    if (const auto* real = std::get_if<RealSamplerParam>(&p.value)) {
      app.parse(name + " " + std::to_string(real->hi), false);
      EXPECT_EQ(params.*real->member, static_cast<float>(real->hi));
      above = std::to_string(real->hi + 1);
    } else {
      const auto& integral = std::get<IntegerSamplerParam>(p.value);
      app.parse(name + " " + std::to_string(integral.hi), false);
      EXPECT_EQ(integral.get(params), integral.hi);
      if (integral.hi == std::numeric_limits<int64_t>::max()) continue;
      above = std::to_string(integral.hi + 1);
    }
    try {
      app.parse(name + " " + above, false);
      ADD_FAILURE() << name << " " << above << " was taken";
    } catch (const CLI::ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
  // llama.cpp's seed -1: a random seed.
  SamplerParams params;
  params.seed = 7;
  CLI::App app{"sampler flags", "test"};
  cli::add_sampler_flags(app, params);
  app.parse("-s -1", false);
  EXPECT_EQ(params.seed, kRandomSeed);
}

}  // namespace
}  // namespace lumen::runtime
