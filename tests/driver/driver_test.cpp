// The compile driver: each stage stops where asked; a DSL program's problems,
// memory planning's in-place limits included, are diagnostics at the line at
// fault, other user errors one line; the `model` line names a program; the
// program of an architecture is found in its folder; the compiled-model
// cache compiles once per program text and target, then reuses the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "lumen/driver/driver.h"
#include "lumen/dsl/frontend.h"

namespace lumen::driver {
namespace {

namespace fs = std::filesystem;

std::string qwen2_text() { return Source::read(LUMEN_SOURCE_DIR "/dsl/qwen2.dsl").text; }

// qwen2.dsl with each `from` (once) replaced by its `to`.
Source qwen2_with(std::initializer_list<std::pair<std::string, std::string>> edits) {
  std::string text = qwen2_text();
  for (const auto& [from, to] : edits) {
    const size_t at = text.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) text.replace(at, from.size(), to);
  }
  return {"qwen2.dsl", text};
}

// The diagnostics of a refused compile ("" and a failure if it compiles).
std::string refusal(const Source& source) {
  try {
    compile(source, {});
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "1 error(s) in '" + source.file + "'");
    return e.diagnostics;
  }
  ADD_FAILURE() << "compiles";
  return "";
}

// One folder per test, removed afterwards.
class DriverFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(LUMEN_BINARY_DIR) / "tests" / "driver" /
           (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + "-" +
            std::to_string(getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_ / "dsl");
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  void write(const fs::path& path, const std::string& text) { std::ofstream(path, std::ios::binary) << text; }
  fs::path dir_;
};

TEST(Driver, StopsAtTheStageAsked) {
  const Source source = Source::read(LUMEN_SOURCE_DIR "/dsl/qwen2.dsl");
  Options options;
  options.stage = Stage::Ir;
  options.stop_after = "lower";
  Compilation c = compile(source, options);
  ASSERT_TRUE(c.ast);
  EXPECT_EQ(c.ast->arch, "qwen2");
  EXPECT_FALSE(c.ir->forward.type(c.ir->forward.pre.at(0).result).known);  // before infer_shapes
  EXPECT_FALSE(c.program);

  options.stop_after = "fuse_qkv";
  int passes = 0;
  options.after_each = [&](const passes::PassInfo&, const ir::Module&) { ++passes; };
  c = compile(source, options);
  EXPECT_EQ(passes, 4);
  EXPECT_FALSE(c.ir->memory);

  options = {};
  options.stage = Stage::Kernels;
  c = compile(source, options);
  ASSERT_TRUE(c.program);
  EXPECT_TRUE(c.ir->memory);
  EXPECT_EQ(c.kernels.count("gemv.bias"), 1u);
  for (const auto& [name, code] : c.kernels) EXPECT_FALSE(code.empty()) << name;

  options.stage = Stage::Ir;
  options.stop_after = "nope";
  EXPECT_THROW(compile(source, options), Error);
}

TEST(Driver, UserErrorsThatAreNotInADslProgramAreOneLine) {
  try {
    Source::read(LUMEN_BINARY_DIR "/no/such/file.dsl");
    FAIL() << "read";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "cannot read '" LUMEN_BINARY_DIR "/no/such/file.dsl'");
    EXPECT_EQ(e.diagnostics, "");
  }
  try {
    compile({"bad.ir", "module m\nfunc"}, {});
    FAIL() << "parse";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("bad.ir: line ", 0), 0u) << e.what();
    EXPECT_EQ(e.diagnostics, "");
  }
}

// Memory planning's limits are not any one op's rule: the driver reports
// them at the statement of the op at fault, so `check` refuses these too.
TEST(Driver, InPlaceLimitsAreDiagnosticsAtTheStatement) {
  // The last update of the carried x is a norm, not an in-place op.
  EXPECT_EQ(refusal(qwen2_with({{"wdown[l])\n", "wdown[l])\n    x = rms_norm(x, ffn_norm[l], rms_eps)  # last\n"}})),
            "qwen2.dsl:63:5: error: plan_memory: the layer loop yields a value that is not computed in place of the "
            "carried one\n"
            "    x = rms_norm(x, ffn_norm[l], rms_eps)  # last\n"
            "    ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n");
  // q is read after rope rotated it in place.
  EXPECT_EQ(refusal(qwen2_with({{"    q = rope(q,", "    r = rope(q,"},
                                {"a = attention(q, k, v,", "a = attention(r, k, v,"},
                                {"x = x + matmul(a, wo[l])", "x = x + matmul(a + q, wo[l])"}})),
            "qwen2.dsl:56:5: error: plan_memory: rope's input is read after the rotation\n"
            "    r = rope(q, heads = n_head, dim = head_dim, base = rope_base, mode = neox)\n"
            "    ^~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~\n");
  // e is the value x enters the loop with, read after the loop.
  const std::string diagnostics =
      refusal(qwen2_with({{"  x = embed(tok_embd, tokens)", "  e = embed(tok_embd, tokens)\n  x = e"},
                          {"h = rms_norm(last(x)", "h = rms_norm(last(e)"}}));
  EXPECT_EQ(diagnostics.rfind("qwen2.dsl:65:3: error: plan_memory: a loop's initial value is read after the loop starts\n",
                              0),
            0u)
      << diagnostics;
}

TEST(Driver, TheModelLineNamesTheProgram) {
  EXPECT_EQ(dsl::model_name("a.dsl", "# a comment\n\nmodel qwen2   # trailing\nparam x : int = key(\"k\")\n"), "qwen2");
  EXPECT_EQ(dsl::model_name("a.dsl", "model llama\nthis is not a program"), "llama");
  EXPECT_EQ(dsl::model_name("a.dsl", "param x : int = key(\"k\")\n"), "");
  EXPECT_EQ(dsl::model_name("a.dsl", ""), "");
}

TEST_F(DriverFiles, FindsTheProgramOfAnArchitecture) {
  write(dir_ / "dsl" / "a.dsl", "model foo\n");
  write(dir_ / "dsl" / "b.dsl", "# bar's program\nmodel bar\n");
  write(dir_ / "dsl" / "c.dsl", "no model line\n");
  write(dir_ / "dsl" / "d.txt", "model baz\n");
  const std::string folder = (dir_ / "dsl").string();
  const Source bar = find_program(folder, "bar");
  EXPECT_EQ(bar.file, (dir_ / "dsl" / "b.dsl").string());
  EXPECT_EQ(bar.text, "# bar's program\nmodel bar\n");
  try {
    find_program(folder, "baz");
    FAIL() << "found baz";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()),
              "no model program describes architecture 'baz' (programs in '" + folder + "': foo, bar)");
  }
  EXPECT_THROW(find_program((dir_ / "none").string(), "foo"), Error);
}

TEST_F(DriverFiles, TheDslFolderIsTheOverrideElseTheEnvironments) {
  const char* saved = std::getenv("LUMEN_DSL_DIR");
  const std::string keep = saved ? saved : "";
  setenv("LUMEN_DSL_DIR", "/from/env", 1);
  EXPECT_EQ(dsl_folder(std::string("/given")), "/given");
  EXPECT_EQ(dsl_folder(), "/from/env");
  unsetenv("LUMEN_DSL_DIR");
  EXPECT_TRUE(fs::is_directory(dsl_folder()));  // installed, else this source tree's
  if (saved) setenv("LUMEN_DSL_DIR", keep.c_str(), 1);
}

TEST_F(DriverFiles, TheModelCacheCompilesOncePerProgramAndTarget) {
  const char* saved = std::getenv("LUMEN_CACHE_DIR");
  const std::string keep = saved ? saved : "";
  setenv("LUMEN_CACHE_DIR", (dir_ / "cache").c_str(), 1);
  const std::string folder = (dir_ / "dsl").string();
  write(dir_ / "dsl" / "qwen2.dsl", qwen2_text());

  const CachedModel first = model_for_architecture("qwen2", Isa::Avx2, CpuTune::Generic, folder, {});
  EXPECT_TRUE(first.compiled);
  EXPECT_EQ(first.program, (dir_ / "dsl" / "qwen2.dsl").string());
  EXPECT_EQ(fs::path(first.path).parent_path(), dir_ / "cache");
  EXPECT_GT(fs::file_size(first.path), 0u);
  const CachedModel again = model_for_architecture("qwen2", Isa::Avx2, CpuTune::Generic, folder, {});
  EXPECT_FALSE(again.compiled);
  EXPECT_EQ(again.path, first.path);
  EXPECT_NE(model_for_architecture("qwen2", Isa::Avx512, CpuTune::Generic, folder, {}).path, first.path);  // another target
  EXPECT_NE(model_for_architecture("qwen2", Isa::Avx2, CpuTune::Zen4, folder, {}).path, first.path);  // another tuning
  write(dir_ / "dsl" / "qwen2.dsl", qwen2_text() + "# edited\n");
  const CachedModel edited = model_for_architecture("qwen2", Isa::Avx2, CpuTune::Generic, folder, {});
  EXPECT_TRUE(edited.compiled);
  EXPECT_NE(edited.path, first.path);

  // A program that does not compile: its diagnostics, and nothing in the cache.
  write(dir_ / "dsl" / "qwen2.dsl", "model qwen2\nparam n : int = nope\n");
  try {
    model_for_architecture("qwen2", Isa::Avx2, CpuTune::Generic, folder, {});
    FAIL() << "compiled";
  } catch (const Error& e) {
    EXPECT_NE(e.diagnostics.find((dir_ / "dsl" / "qwen2.dsl").string() + ":2:"), std::string::npos) << e.diagnostics;
  }
  size_t files = 0;
  for (const auto& entry : fs::directory_iterator(dir_ / "cache")) files += entry.path().extension() == ".so";
  EXPECT_EQ(files, 4u);  // two targets and a tuning of the first program, and the edited one
  for (const auto& entry : fs::directory_iterator(dir_ / "cache"))
    EXPECT_EQ(entry.path().string().find(".partial"), std::string::npos) << entry.path();

  if (saved) {
    setenv("LUMEN_CACHE_DIR", keep.c_str(), 1);
  } else {
    unsetenv("LUMEN_CACHE_DIR");
  }
}

}  // namespace
}  // namespace lumen::driver
