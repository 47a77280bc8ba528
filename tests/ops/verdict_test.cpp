// The verdict test: hundreds of programs mutated from dsl/qwen2.dsl and
// dsl/llama.dsl (fixed seed) get one verdict from `lumenc check`,
// `lumenc dump-ir` and `lumenc compile`: all accept, or all reject with the
// same first diagnostic, at file:line:col with a caret; nothing is an
// internal error, and every program check accepts compiles. For every
// mutant the compile driver runs what each subcommand asks of it (lumenc is
// one driver call per subcommand), `compile` through the generation of every
// kernel; the lumenc binary runs on a sample, to model.so, and lumen-run on a
// few accepted ones. Also: a matmul on an f16 weight and a layer loop that
// does not update its carried value in place are refused by `check` at the
// line at fault, and tests/data/wide_heads.dsl (n_head * head_dim != n_embd)
// compiles, binds and runs.
#include <gtest/gtest.h>
#include <unistd.h>

#include <sys/wait.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string_view>

#include "lumen/common/internal_error.h"
#include "lumen/driver/driver.h"
#include "lumen/ops/op_table.h"

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
  static const char* const kDtypes[] = {"any", "f32", "f16", "q8_0", "i32"};
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
        const size_t i = pick(dts);
        std::vector<const char*> others;
        for (const char* d : kDtypes)
          if (tok(i) != d) others.push_back(d);
        return replace(t[i].begin, t[i].end, others[rng.below(others.size())]);
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

// The subcommands, as lumenc asks the driver for them.
enum class Subcommand { Check, DumpIr, Compile };
constexpr Subcommand kSubcommands[] = {Subcommand::Check, Subcommand::DumpIr, Subcommand::Compile};
const char* to_string(Subcommand s) {
  return s == Subcommand::Check ? "check" : s == Subcommand::DumpIr ? "dump-ir" : "compile";
}

lumen::driver::Options options_of(Subcommand s) {
  lumen::driver::Options o;
  o.target = lumen::Isa::Avx2;
  o.stage = s == Subcommand::Check    ? lumen::driver::Stage::Program
            : s == Subcommand::DumpIr ? lumen::driver::Stage::Ir
                                      : lumen::driver::Stage::Kernels;  // lumenc writes model.so from these
  return o;
}

struct Verdict {
  bool accepted = false;
  std::string diagnostics;  // formatted: a rejection's errors, an acceptance's warnings
  std::string first_error;  // a rejection's first "NAME:LINE:COL: error: ..." line
  std::string summary;      // a rejection's one line (driver::Error::what)
  std::string failure;      // a broken promise: an internal error, a rejection without a diagnostic, no kernels
};

std::string first_error_line(const std::string& diagnostics) {
  std::stringstream ss(diagnostics);
  for (std::string line; std::getline(ss, line);)
    if (line.find(": error: ") != std::string::npos) return line;
  return "";
}

Verdict run_driver(const std::string& name, const std::string& text, Subcommand s) {
  Verdict v;
  try {
    const lumen::driver::Compilation c = lumen::driver::compile({name, text}, options_of(s));
    v.accepted = true;
    v.diagnostics = c.diags.format();
    if (s == Subcommand::Compile && c.kernels.empty()) v.failure = "compiled without kernels";
    for (const auto& [kernel, code] : c.kernels)
      if (code.empty()) v.failure = "no code for kernel " + kernel;
  } catch (const lumen::driver::Error& e) {
    v.diagnostics = e.diagnostics;
    v.first_error = first_error_line(e.diagnostics);
    v.summary = e.what();
    if (v.first_error.empty()) v.failure = std::string("rejected without a diagnostic: ") + e.what();
  } catch (const lumen::InternalError& e) {
    v.failure = e.what();
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

TEST(Verdict, CheckDumpIrAndCompileGiveOneVerdictToEveryMutant) {
  int accepted = 0, rejected = 0;
  for (const Mutant& m : mutants()) {
    SCOPED_TRACE(edit_of(m));
    const Verdict check = run_driver(m.name, m.text, Subcommand::Check);
    EXPECT_EQ(check.failure, "");
    for (Subcommand s : {Subcommand::DumpIr, Subcommand::Compile}) {
      const Verdict v = run_driver(m.name, m.text, s);
      EXPECT_EQ(v.failure, "") << to_string(s);
      EXPECT_EQ(v.accepted, check.accepted) << to_string(s) << " disagrees with check: " << v.diagnostics;
      EXPECT_EQ(v.diagnostics, check.diagnostics) << to_string(s) << " disagrees with check";
      EXPECT_EQ(v.summary, check.summary) << to_string(s) << " disagrees with check";
    }
    if (check.accepted) {
      ++accepted;
    } else {
      ++rejected;
      EXPECT_EQ(diagnostics_problem(m.name, check.diagnostics), "") << check.diagnostics;
    }
    if (::testing::Test::HasFailure()) break;  // one mutant's report is enough to read
  }
  EXPECT_EQ(accepted + rejected, 440);
  std::printf("%d mutants accepted, %d rejected\n", accepted, rejected);
  // Both verdicts are well represented: the mutations are neither all fatal nor all harmless.
  EXPECT_GE(accepted, 40);
  EXPECT_GE(rejected, 200);
}

// Every mutation kind edits what it says: "another dtype" swaps exactly one
// dtype token for a different one, so some mutants differ from their base
// in one dtype and nothing else.
TEST(Verdict, TheDtypeMutationSwapsOneDtype) {
  static const char* const kDtypes[] = {"any", "f32", "f16", "q8_0", "i32"};
  int one_dtype_edits = 0;
  for (const Mutant& m : mutants()) {
    const std::string base = read_file(fs::path(LUMEN_SOURCE_DIR) / "dsl" / m.base);
    const std::vector<Token> a = tokenize(base), b = tokenize(m.text);
    if (a.size() != b.size()) continue;
    int differ = 0;
    bool dtypes_only = true;
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string x = base.substr(a[i].begin, a[i].end - a[i].begin);
      const std::string y = m.text.substr(b[i].begin, b[i].end - b[i].begin);
      if (x == y) continue;
      ++differ;
      dtypes_only = dtypes_only && std::count(std::begin(kDtypes), std::end(kDtypes), x) == 1 &&
                    std::count(std::begin(kDtypes), std::end(kDtypes), y) == 1;
    }
    if (differ == 1 && dtypes_only) ++one_dtype_edits;
  }
  EXPECT_GE(one_dtype_edits, 10);
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

  // The three subcommands of the lumenc binary on `file` (holding `text`):
  // the driver's verdict, its diagnostics on stderr, then its one line; an
  // accepted program compiles to `so`.
  void expect_one_verdict(const fs::path& file, const std::string& text, const fs::path& so) {
    std::ofstream(file) << text;
    const Verdict v = run_driver(file.string(), text, Subcommand::Check);
    ASSERT_EQ(v.failure, "");
    const std::string path = quote(file.string());
    std::string err[3];
    const int status[3] = {run(tool("lumenc") + " check " + path, &err[0]),
                           run(tool("lumenc") + " dump-ir " + path, &err[1]),
                           run(tool("lumenc") + " compile --target avx2 " + path + " -o " + quote(so.string()), &err[2])};
    for (Subcommand s : kSubcommands) {
      const int i = static_cast<int>(s);
      EXPECT_EQ(status[i], v.accepted ? 0 : 1) << to_string(s) << ": " << err[i];
      EXPECT_EQ(err[i], v.accepted ? v.diagnostics : v.diagnostics + "lumenc: error: " + v.summary + "\n")
          << to_string(s);
    }
    if (!v.accepted) {
      EXPECT_EQ(diagnostics_problem(file.string(), v.diagnostics), "") << v.diagnostics;
    }
    if (v.accepted) {
      EXPECT_GT(fs::file_size(so), 0u);
    }
  }

  fs::path dir_;
};

TEST_F(CliVerdict, LumencAgreesWithTheDriverOnASample) {
  const std::vector<Mutant> all = mutants();
  int accepted = 0, rejected = 0, ran = 0;
  const bool have_gguf = fs::exists(tiny_gguf());
  constexpr int kEach = 6;
  for (size_t i = 0; i < all.size() && (accepted < kEach || rejected < kEach); i += 3) {
    const Mutant& m = all[i];
    const bool ok = run_driver(m.name, m.text, Subcommand::Check).accepted;
    if ((ok && accepted >= kEach) || (!ok && rejected >= kEach)) continue;
    (ok ? accepted : rejected) += 1;
    SCOPED_TRACE(edit_of(m));
    const fs::path so = dir_ / (m.name + ".so");
    expect_one_verdict(dir_ / m.name, m.text, so);
    if (ok && have_gguf && ran < 2 && m.name.rfind("qwen2", 0) == 0) {
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
  EXPECT_EQ(accepted, kEach);
  EXPECT_EQ(rejected, kEach);
  if (have_gguf) {
    EXPECT_GT(ran, 0);
  }
}

// qwen2.dsl with `from` (once) replaced by `to`.
std::string qwen2_with(const std::string& from, const std::string& to) {
  std::string text = read_file(fs::path(LUMEN_SOURCE_DIR) / "dsl" / "qwen2.dsl");
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  if (at != std::string::npos) text.replace(at, from.size(), to);
  return text;
}

// "NAME:LINE:COL: error: " for the first line of `text` containing `line_text`,
// the column that of `at` in it.
std::string location(const std::string& name, const std::string& text, const std::string& line_text,
                     const std::string& at) {
  std::stringstream ss(text);
  int line = 0;
  for (std::string l; std::getline(ss, l);) {
    ++line;
    if (l.find(line_text) == std::string::npos) continue;
    return name + ":" + std::to_string(line) + ":" + std::to_string(l.find(at) + 1) + ": error: ";
  }
  ADD_FAILURE() << "no line with " << line_text;
  return "";
}

// A matmul weight is a matrix (of any weight type): check refuses a vector
// at the argument, as compile would (schedule once refused it without a place).
TEST_F(CliVerdict, CheckRefusesAVectorMatmulWeightWhereItIsUsed) {
  const std::string text = qwen2_with("wo        : any[n_embd, n_embd]", "wo        : f32[n_embd]");
  const fs::path file = dir_ / "qwen2_vector_wo.dsl";
  const Verdict v = run_driver(file.string(), text, Subcommand::Check);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.first_error, location(file.string(), text, "matmul(a, wo[l])", "wo[l]") +
                               "'matmul' needs a 2-D weight [rows, row_length], found f32[n_embd]");
  expect_one_verdict(file, text, dir_ / "qwen2_vector_wo.so");
}

// A norm weight is f32: check refuses one left to the file (`any`) at the
// argument, as compile would.
TEST_F(CliVerdict, CheckRefusesAnAnyNormWeightWhereItIsUsed) {
  const std::string text = qwen2_with("attn_norm : f32[n_embd]", "attn_norm : any[n_embd]");
  const fs::path file = dir_ / "qwen2_any_norm.dsl";
  const Verdict v = run_driver(file.string(), text, Subcommand::Check);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.first_error, location(file.string(), text, "rms_norm(x, attn_norm[l]", "attn_norm[l]") +
                               "rms_norm weight must be f32[n_embd] to match f32[N, n_embd], found any[n_embd]");
  expect_one_verdict(file, text, dir_ / "qwen2_any_norm.so");
}

// A limit of memory planning, not of any one op: the carried value of the
// layer loop must be updated in place. check reports it at the statement.
TEST_F(CliVerdict, CheckRefusesALoopThatDoesNotUpdateItsCarriedValueInPlace) {
  const std::string last = "    x = x + matmul(silu(matmul(h, wgate[l])) * matmul(h, wup[l]), wdown[l])\n";
  const std::string text = qwen2_with(last, last + "    x = rms_norm(x, ffn_norm[l], rms_eps)\n");
  const fs::path file = dir_ / "qwen2_norm_last.dsl";
  const Verdict v = run_driver(file.string(), text, Subcommand::Check);
  EXPECT_FALSE(v.accepted);
  EXPECT_EQ(v.first_error, location(file.string(), text, "x = rms_norm(x, ffn_norm[l]", "x = rms_norm") +
                               "plan_memory: the layer loop yields a value that is not computed in place of the "
                               "carried one");
  expect_one_verdict(file, text, dir_ / "qwen2_norm_last.so");
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
