// The verdict test: hundreds of programs mutated from dsl/qwen2.dsl and
// dsl/llama.dsl (fixed seed) get the same verdict from `lumenc check`,
// `lumenc dump-ir` and `lumenc compile`; every rejection is a
// file:line:col diagnostic with a caret; nothing is an internal error. The
// pipeline runs in process for all of them (what each subcommand runs, up to
// the kernels); the CLI runs on a sample, and lumen-run on a few accepted
// ones. Also: tests/data/wide_heads.dsl (n_head * head_dim != n_embd)
// compiles, binds and runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "lumen/codegen/codegen.h"
#include "lumen/common/internal_error.h"
#include "lumen/dsl/frontend.h"
#include "lumen/ir/lower_ast.h"
#include "lumen/ir/verifier.h"
#include "lumen/ops/op_table.h"
#include "lumen/passes/passes.h"
#include "lumen/program/program.h"

namespace {

namespace fs = std::filesystem;

std::string read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// ---------------------------------------------------------------- mutation

// A deterministic generator (the same mutants on every platform).
class Rng {
 public:
  explicit Rng(uint64_t seed) : state_(seed) {}
  uint64_t next() {
    uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }

 private:
  uint64_t state_;
};

struct Token {
  size_t begin, end;
  enum Kind { Ident, Number, String, Punct } kind;
};

std::vector<Token> tokenize(const std::string& s) {
  std::vector<Token> out;
  size_t i = 0;
  while (i < s.size()) {
    char c = s[i];
    if (c == '#') {
      while (i < s.size() && s[i] != '\n') ++i;
    } else if (std::isspace(static_cast<unsigned char>(c))) {
      ++i;
    } else if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      size_t b = i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '_')) ++i;
      out.push_back({b, i, Token::Ident});
    } else if (std::isdigit(static_cast<unsigned char>(c))) {
      size_t b = i;
      while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '.' || s[i] == '-')) ++i;
      out.push_back({b, i, Token::Number});
    } else if (c == '"') {
      size_t b = i++;
      while (i < s.size() && s[i] != '"' && s[i] != '\n') ++i;
      if (i < s.size()) ++i;
      out.push_back({b, i, Token::String});
    } else {
      out.push_back({i, i + 1, Token::Punct});
      ++i;
    }
  }
  return out;
}

// The top-level argument spans [begin, end) of the call whose '(' is token `open`.
std::vector<std::pair<size_t, size_t>> call_args(const std::string& s, const std::vector<Token>& t, size_t open) {
  std::vector<std::pair<size_t, size_t>> args;
  int depth = 0;
  size_t start = t[open].end;
  for (size_t i = open; i < t.size(); ++i) {
    char c = s[t[i].begin];
    if (t[i].kind != Token::Punct) continue;
    if (c == '(' || c == '[') ++depth;
    if (c == ')' || c == ']') {
      if (--depth == 0) {
        if (t[i].begin > start) args.emplace_back(start, t[i].begin);
        return args;
      }
    }
    if (c == ',' && depth == 1) {
      args.emplace_back(start, t[i].begin);
      start = t[i].end;
    }
  }
  return {};
}

std::string trim(std::string s) {
  while (!s.empty() && s.front() == ' ') s.erase(s.begin());
  while (!s.empty() && s.back() == ' ') s.pop_back();
  return s;
}

// One random edit of the kinds a user makes: wrong names, swapped or missing
// operands, wrong dims, dropped or renamed attributes, wrong counts, other
// ops, lines lost or repeated.
std::string mutate(const std::string& s, Rng& rng) {
  std::vector<Token> t = tokenize(s);
  std::vector<size_t> idents, numbers, calls, keywords, dims, ops_plus;
  for (size_t i = 0; i < t.size(); ++i) {
    auto text = s.substr(t[i].begin, t[i].end - t[i].begin);
    if (t[i].kind == Token::Ident) {
      idents.push_back(i);
      if (i + 1 < t.size() && s[t[i + 1].begin] == '(') calls.push_back(i);
      if (i + 1 < t.size() && s[t[i + 1].begin] == '=' && i > 0 &&
          (s[t[i - 1].begin] == ',' || s[t[i - 1].begin] == '('))
        keywords.push_back(i);
    }
    if (t[i].kind == Token::Number) numbers.push_back(i);
    if (t[i].kind == Token::Punct && (text == "+" || text == "*")) ops_plus.push_back(i);
    if (t[i].kind == Token::Ident && i > 0 && (s[t[i - 1].begin] == '[' || (s[t[i - 1].begin] == ',' && i > 2 &&
                                                                              s[t[i - 3].begin] == '[')))
      dims.push_back(i);
  }
  auto replace = [&](size_t b, size_t e, const std::string& with) { return s.substr(0, b) + with + s.substr(e); };
  auto tok = [&](size_t i) { return s.substr(t[i].begin, t[i].end - t[i].begin); };
  auto pick = [&](const std::vector<size_t>& v) { return v[rng.below(v.size())]; };
  static const char* const kDtypes[] = {"f32", "f16", "q8_0", "i32"};
  for (int attempt = 0; attempt < 20; ++attempt) {
    switch (rng.below(13)) {
      case 0: {  // another name
        size_t i = pick(idents), j = pick(idents);
        if (tok(i) != tok(j)) return replace(t[i].begin, t[i].end, tok(j));
        break;
      }
      case 1:    // swap two arguments
      case 2:    // drop an argument
      case 3: {  // repeat an argument
        size_t c = pick(calls);
        auto args = call_args(s, t, c + 1);
        if (args.size() < 2) break;
        size_t a = rng.below(args.size() - 1);
        auto [b0, e0] = args[a];
        auto [b1, e1] = args[a + 1];
        std::string first = s.substr(b0, e0 - b0), second = s.substr(b1, e1 - b1);
        int kind = static_cast<int>(rng.below(3));
        if (kind == 0) return s.substr(0, b0) + " " + trim(second) + ", " + trim(first) + s.substr(e1);
        if (kind == 1) return s.substr(0, b0) + trim(second) + s.substr(e1);
        return s.substr(0, e1) + ", " + trim(second) + s.substr(e1);
      }
      case 4: {  // rename or drop a keyword argument
        if (keywords.empty()) break;
        size_t k = pick(keywords);
        if (rng.below(2) == 0) return replace(t[k].begin, t[k].end, tok(k) + "s");
        auto args = call_args(s, t, [&] {
          size_t i = k;
          int depth = 0;
          while (i > 0) {
            char c = s[t[i].begin];
            if (c == ')') ++depth;
            if (c == '(' && depth-- == 0) return i;
            --i;
          }
          return i;
        }());
        for (size_t a = 0; a < args.size(); ++a)
          if (args[a].first <= t[k].begin && t[k].begin < args[a].second) {
            size_t b = a == 0 ? args[a].first : args[a - 1].second;
            return s.substr(0, b) + s.substr(args[a].second);
          }
        break;
      }
      case 5: {  // another op
        size_t c = pick(calls);
        std::vector<std::string> names = {"sqrt", "min", "max"};
        for (const auto& op : lumen::ops::op_table())
          if (op.in_dsl) names.push_back(op.name);
        return replace(t[c].begin, t[c].end, names[rng.below(names.size())]);
      }
      case 6:    // drop a line
      case 7: {  // repeat a line
        size_t line_start = s.find('\n', rng.below(s.size()));
        if (line_start == std::string::npos) break;
        size_t line_end = s.find('\n', line_start + 1);
        if (line_end == std::string::npos) break;
        std::string line = s.substr(line_start, line_end - line_start);
        return s.substr(0, line_start) + (rng.below(2) ? line + line : "") + s.substr(line_end);
      }
      case 8: {  // another number
        if (numbers.empty()) break;
        static const char* const kNumbers[] = {"0", "1", "3", "64", "2.5", "-1"};
        size_t i = pick(numbers);
        return replace(t[i].begin, t[i].end, kNumbers[rng.below(6)]);
      }
      case 9: {  // + <-> *
        if (ops_plus.empty()) break;
        size_t i = pick(ops_plus);
        return replace(t[i].begin, t[i].end, tok(i) == "+" ? "*" : "+");
      }
      case 10: {  // another dtype
        std::vector<size_t> dts;
        for (size_t i : idents)
          for (const char* d : kDtypes)
            if (tok(i) == d) dts.push_back(i);
        if (dts.empty()) break;
        return replace(t[pick(dts)].begin, t[pick(dts)].end, kDtypes[rng.below(4)]);
      }
      case 11: {  // another dim in a shape
        if (dims.empty()) break;
        size_t i = pick(dims);
        static const char* const kDims[] = {"n_embd", "n_ff", "n_head", "n_embd_kv", "head_dim", "n_vocab", "N"};
        std::string with = rng.below(3) == 0 ? tok(i) + " * 2" : kDims[rng.below(7)];
        return replace(t[i].begin, t[i].end, with);
      }
      case 12: {  // the token count where a size is expected
        size_t i = pick(idents);
        return replace(t[i].begin, t[i].end, "N");
      }
    }
  }
  return s;
}

// ----------------------------------------------------------------- verdicts

struct Verdict {
  bool accepted = false;
  std::string diagnostics;
  std::string failure;  // a broken promise (accepted but a later stage fails, an internal error)
};

// What `lumenc check` runs, then what dump-ir and compile add: verification,
// the passes, the program (and its text form) and every kernel it names.
Verdict run_pipeline(const std::string& name, const std::string& text, std::set<std::string>& kernels_done) {
  Verdict v;
  try {
    lumen::DiagnosticEngine diags;
    auto ast = lumen::dsl::parse_and_check(name, text, diags);
    std::optional<lumen::ir::Module> m;
    if (ast) m = lumen::ir::lower_ast(*ast, diags);
    v.diagnostics = diags.format();
    if (!m) return v;
    v.accepted = true;
    auto problems = lumen::ir::verify(*m, /*require_types=*/false);
    if (!problems.empty()) {
      v.failure = "check accepts, the verifier rejects: " + problems.front();
      return v;
    }
    lumen::passes::run_pipeline(*m, lumen::Isa::Avx2);
    lumen::program::Program p = lumen::passes::lower_to_program(*m);
    std::string serialized = lumen::program::serialize(p);
    for (const lumen::program::Section s : lumen::program::kSections)
      for (const lumen::program::Op& op : p.ops(s))
        if (op.kind == lumen::ops::OpId::MatMul)
          for (const auto& k : op.schedule.kernels())
            if (kernels_done.insert(lumen::program::to_string(k)).second)
              lumen::codegen::generate_matmul_kernel(lumen::Isa::Avx2, k);
  } catch (const lumen::InternalError& e) {
    v.failure = std::string("internal error: ") + e.what();
  } catch (const std::exception& e) {
    v.failure = std::string("check accepts, a later stage rejects: ") + e.what();
  }
  return v;
}

// Every error line of `diagnostics` is "NAME:line:col: error: ..." followed by the
// source line and a caret line.
std::string diagnostics_problem(const std::string& name, const std::string& diagnostics) {
  std::vector<std::string> lines;
  std::stringstream ss(diagnostics);
  for (std::string line; std::getline(ss, line);) lines.push_back(line);
  // NAME:LINE:COL: error: MESSAGE
  const auto located = [&](const std::string& line) {
    if (line.compare(0, name.size(), name) != 0) return false;
    size_t at = name.size();
    for (int field = 0; field < 2; ++field) {
      if (at >= line.size() || line[at] != ':') return false;
      const size_t digits = ++at;
      while (at < line.size() && line[at] >= '0' && line[at] <= '9') ++at;
      if (at == digits) return false;
    }
    const std::string_view rest = std::string_view(line).substr(at);
    return rest.size() > 9 && rest.substr(0, 9) == ": error: ";
  };
  int errors = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].find(": error: ") == std::string::npos) continue;
    ++errors;
    if (!located(lines[i])) return "not file:line:col: " + lines[i];
    if (i + 2 >= lines.size() || lines[i + 2].find('^') == std::string::npos) return "no caret under: " + lines[i];
  }
  return errors == 0 ? "a rejection without an error diagnostic" : "";
}

struct Mutant {
  std::string name, text, base;
};

// The lines of `mutant` that `base` lacks (+) and those it lost (-): the edit, for failure messages.
std::string edit_of(const Mutant& m) {
  auto lines = [](const std::string& s) {
    std::multiset<std::string> out;
    std::stringstream ss(s);
    for (std::string line; std::getline(ss, line);) out.insert(line);
    return out;
  };
  std::multiset<std::string> a = lines(read_file(fs::path(LUMEN_SOURCE_DIR) / "dsl" / m.base)), b = lines(m.text);
  std::string out = m.name + ", edited from dsl/" + m.base + ":\n";
  for (const auto& line : b)
    if (a.count(line) < b.count(line)) out += "+ " + line + "\n";
  for (const auto& line : a)
    if (b.count(line) < a.count(line)) out += "- " + line + "\n";
  return out;
}

std::vector<Mutant> mutants() {
  std::vector<Mutant> out;
  Rng rng(20261201);
  for (const char* base : {"qwen2", "llama"}) {
    std::string source = read_file(fs::path(LUMEN_SOURCE_DIR) / "dsl" / (std::string(base) + ".dsl"));
    for (int i = 0; i < 220; ++i) {
      std::string text = mutate(source, rng);
      if (rng.below(3) == 0) text = mutate(text, rng);
      out.push_back({std::string(base) + "_m" + std::to_string(i) + ".dsl", text, std::string(base) + ".dsl"});
    }
  }
  return out;
}

TEST(Verdict, MutatedProgramsAreRejectedWithALocationOrCompile) {
  std::set<std::string> kernels;
  int accepted = 0, rejected = 0;
  for (const Mutant& m : mutants()) {
    SCOPED_TRACE(edit_of(m));
    Verdict v = run_pipeline(m.name, m.text, kernels);
    EXPECT_EQ(v.failure, "");
    if (v.accepted) {
      ++accepted;
    } else {
      ++rejected;
      EXPECT_EQ(diagnostics_problem(m.name, v.diagnostics), "") << v.diagnostics;
    }
    if (::testing::Test::HasFailure()) break;  // one mutant's report is enough to read
  }
  EXPECT_EQ(accepted + rejected, 440);
  std::printf("%d mutants accepted, %d rejected\n", accepted, rejected);
  // Both verdicts are well represented: the mutations are neither all fatal nor all harmless.
  EXPECT_GE(accepted, 40);
  EXPECT_GE(rejected, 200);
}

// ---------------------------------------------------------------------- CLI

class CliVerdict : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(LUMEN_BINARY_DIR) / "tests" / "ops" / ("verdict_files_" + std::to_string(getpid()));
    fs::create_directories(dir_);
  }
  void TearDown() override {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  // Exit status of a command (-1 when a signal stopped it); stderr into *err.
  int run(const std::string& cmd, std::string* err = nullptr) {
    fs::path err_file = dir_ / "stderr.txt";
    int status = std::system((cmd + " >" + quote((dir_ / "stdout.txt").string()) + " 2>" + quote(err_file.string())).c_str());
    if (err) *err = read_file(err_file);
    if (status == -1 || !WIFEXITED(status)) return -1;
    return WEXITSTATUS(status);
  }
  static std::string quote(const std::string& s) {
    std::string out = "'";  // built stepwise: GCC 12 warns falsely on "'" + s
    out += s;
    out += "'";
    return out;
  }
  static std::string tool(const char* name) { return quote(std::string(LUMEN_BINARY_DIR) + "/tools/" + name); }
  static std::string tiny_gguf() { return std::string(LUMEN_SHARED_DIR) + "/reference/tiny-qwen2-a.gguf"; }

  fs::path dir_;
};

TEST_F(CliVerdict, CheckDumpIrAndCompileAgreeOnASample) {
  std::set<std::string> kernels;
  std::vector<Mutant> all = mutants();
  int accepted = 0, rejected = 0, ran = 0;
  const bool have_gguf = fs::exists(tiny_gguf());
  for (size_t i = 0; i < all.size() && (accepted < 4 || rejected < 4); i += 3) {
    const Mutant& m = all[i];
    bool ok = run_pipeline(m.name, m.text, kernels).accepted;
    if ((ok && accepted >= 4) || (!ok && rejected >= 4)) continue;
    (ok ? accepted : rejected) += 1;
    SCOPED_TRACE(edit_of(m));
    fs::path file = dir_ / m.name;
    std::ofstream(file) << m.text;
    std::string err_check, err_dump, err_compile;
    int check = run(tool("lumenc") + " check " + quote(file.string()), &err_check);
    int dump = run(tool("lumenc") + " dump-ir " + quote(file.string()), &err_dump);
    fs::path so = dir_ / (m.name + ".so");
    int compile =
        run(tool("lumenc") + " compile --target avx2 " + quote(file.string()) + " -o " + quote(so.string()), &err_compile);
    EXPECT_EQ(check, ok ? 0 : 1) << err_check;
    EXPECT_EQ(dump, check) << err_dump;
    EXPECT_EQ(compile, check) << err_compile;
    if (!ok) {
      EXPECT_NE(err_check.find(file.string() + ":"), std::string::npos) << err_check;
      EXPECT_NE(err_check.find("^"), std::string::npos) << err_check;
    } else if (have_gguf && ran < 2 && m.name.rfind("qwen2", 0) == 0) {
      // An accepted program runs, or lumen-run refuses it with a one-line error.
      ++ran;
      std::string err_run;
      int status = run(tool("lumen-run") + " " + quote(so.string()) + " --gguf " + quote(tiny_gguf()) +
                           " --prompt hi -n 2 --threads 1",
                       &err_run);
      EXPECT_TRUE(status == 0 || (status == 1 && err_run.find("lumen-run: error: ") != std::string::npos))
          << status << ": " << err_run;
    }
  }
  EXPECT_EQ(accepted, 4);
  EXPECT_EQ(rejected, 4);
  if (have_gguf) {
    EXPECT_GT(ran, 0);
  }
}

// n_embd != n_head * head_dim (Qwen3, Gemma): the program compiles, binds to
// a synthetic GGUF of that shape and runs; on a file without key_length it
// is qwen2.dsl, bit for bit.
TEST_F(CliVerdict, WideHeadsCompileBindAndRun) {
  if (!fs::exists(tiny_gguf())) GTEST_SKIP() << "no " << tiny_gguf();
  const std::string dsl = std::string(LUMEN_SOURCE_DIR) + "/tests/data/wide_heads.dsl";
  const fs::path so = dir_ / "wide_heads.so", gguf = dir_ / "wide.gguf";
  std::string err;
  ASSERT_EQ(run(tool("lumenc") + " compile " + quote(dsl) + " -o " + quote(so.string()), &err), 0) << err;
  ASSERT_EQ(run(tool("lumen-gguf") + " synth --preset tiny-wide-heads --seed 3 --vocab-from " + quote(tiny_gguf()) +
                    " -o " + quote(gguf.string()),
                &err),
            0)
      << err;
  ASSERT_EQ(run(tool("lumen-run") + " " + quote(so.string()) + " --gguf " + quote(gguf.string()) +
                    " --prompt 'wide heads' -n 4 --threads 2 --dump-logits " + quote((dir_ / "wide.f32").string()),
                &err),
            0)
      << err;
  std::string logits = read_file(dir_ / "wide.f32");
  ASSERT_EQ(logits.size() % 4, 0u);
  ASSERT_GT(logits.size(), 0u);
  for (size_t i = 0; i < logits.size(); i += 4) {
    float f;
    std::memcpy(&f, logits.data() + i, 4);
    ASSERT_TRUE(std::isfinite(f)) << "logit " << i / 4;
  }

  const fs::path qwen2_so = dir_ / "qwen2.so";
  const std::string qwen2 = std::string(LUMEN_SOURCE_DIR) + "/dsl/qwen2.dsl";
  ASSERT_EQ(run(tool("lumenc") + " compile " + quote(qwen2) + " -o " + quote(qwen2_so.string()), &err), 0) << err;
  for (const auto& [model, out] : {std::pair{so, "a.f32"}, std::pair{qwen2_so, "b.f32"}})
    ASSERT_EQ(run(tool("lumen-run") + " " + quote(model.string()) + " --gguf " + quote(tiny_gguf()) +
                      " --prompt 'same answers' -n 1 --threads 2 --dump-logits " + quote((dir_ / out).string()),
                  &err),
              0)
        << err;
  EXPECT_EQ(read_file(dir_ / "a.f32"), read_file(dir_ / "b.f32"));
}

}  // namespace
