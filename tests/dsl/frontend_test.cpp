// The DSL front end end to end: the shipped programs check clean and have
// the expected structure; every program in tests/dsl/invalid/ produces
// exactly the diagnostics in its .expected file; hostile input neither
// crashes nor hangs.
#include "lumen/dsl/frontend.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "lumen/dsl/parser.h"

namespace lumen::dsl {
namespace {

namespace fs = std::filesystem;
using namespace ast;

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::unique_ptr<Module> check_clean(const std::string& relative) {
  DiagnosticEngine d;
  auto m = parse_and_check_file(std::string(LUMEN_SOURCE_DIR) + "/" + relative, d);
  EXPECT_EQ(d.format(), "") << relative;  // no errors and no warnings
  EXPECT_NE(m, nullptr);
  return m;
}

const CallExpr* call(const Expr* e) { return dyn_cast<CallExpr>(e); }

TEST(Frontend, Qwen2ChecksCleanWithExpectedStructure) {
  auto m = check_clean("dsl/qwen2.dsl");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->arch, "qwen2");
  ASSERT_EQ(m->params.size(), 11u);  // 9 params + 2 lets
  EXPECT_EQ(m->checks.size(), 3u);
  EXPECT_EQ(m->weights.size(), 3u);
  ASSERT_NE(m->layer_weights, nullptr);
  EXPECT_EQ(m->layer_weights->weights.size(), 12u);

  const ParamDecl* kv = m->find_param("n_head_kv");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->resolved_key, "qwen2.attention.head_count_kv");
  ASSERT_NE(kv->default_value, nullptr);
  EXPECT_EQ(to_string(*kv->default_value), "n_head");
  EXPECT_EQ(m->find_param("rope_base")->type, ScalarType::Float);
  EXPECT_EQ(m->find_param("n_vocab")->source, ParamDecl::Source::ArrayLength);
  const ParamDecl* head_dim = m->find_param("head_dim");
  EXPECT_EQ(head_dim->source, ParamDecl::Source::Derived);
  EXPECT_EQ(head_dim->type, ScalarType::Int);

  const WeightDecl* output = m->find_weight("output");
  ASSERT_NE(output, nullptr);
  EXPECT_EQ(output->fallback.value_or(""), "token_embd.weight");
  const WeightDecl* wk = m->find_weight("wk");
  ASSERT_NE(wk, nullptr);
  EXPECT_TRUE(wk->per_layer);
  EXPECT_EQ(wk->gguf_name, "blk.{i}.attn_k.weight");
  EXPECT_EQ(to_string(*wk->type.dims[0]), "n_embd_kv");

  ASSERT_NE(m->forward, nullptr);
  const auto& body = m->forward->body;
  ASSERT_EQ(body.size(), 4u);  // x = embed, for, h = rms_norm(last), return
  const auto* loop = dyn_cast<ForStmt>(body[1].get());
  ASSERT_NE(loop, nullptr);
  ASSERT_EQ(loop->body.size(), 10u);
  std::vector<std::string> assigned;
  int carried = 0;
  for (const StmtPtr& s : loop->body) {
    const auto* a = dyn_cast<AssignStmt>(s.get());
    ASSERT_NE(a, nullptr);
    assigned.push_back(a->name);
    carried += a->loop_carried;
    EXPECT_EQ(a->value->type.kind, ValueKind::Tensor);
  }
  EXPECT_EQ(assigned, (std::vector<std::string>{"h", "q", "k", "v", "q", "k", "a", "x", "h", "x"}));
  EXPECT_EQ(carried, 2);  // the two residual updates of x

  // Types with symbolic dims.
  const auto* k = dyn_cast<AssignStmt>(loop->body[2].get());
  EXPECT_EQ(to_string(k->value->type), "f32[N, n_embd_kv]");
  const auto* rope = call(dyn_cast<AssignStmt>(loop->body[4].get())->value.get());
  ASSERT_NE(rope, nullptr);
  EXPECT_EQ(rope->op, lumen::ops::OpId::Rope);
  EXPECT_EQ(to_string(*rope->find("heads")), "n_head");
  const auto* mode = dyn_cast<NameExpr>(rope->find("mode"));
  ASSERT_NE(mode, nullptr);
  EXPECT_EQ(mode->name, "neox");
  EXPECT_EQ(mode->resolved, NameKind::Mode);
  const auto* attn = call(dyn_cast<AssignStmt>(loop->body[6].get())->value.get());
  ASSERT_NE(attn, nullptr);
  EXPECT_EQ(attn->op, lumen::ops::OpId::Attention);
  EXPECT_EQ(to_string(*attn->find("kv_heads")), "n_head_kv");
  EXPECT_EQ(attn->find("scale"), nullptr);  // default 1/sqrt(dim)

  // wq[l] resolves to the layer weight and the loop variable.
  const auto* q_add = dyn_cast<BinaryExpr>(dyn_cast<AssignStmt>(loop->body[1].get())->value.get());
  ASSERT_NE(q_add, nullptr);
  const auto* bq = dyn_cast<IndexExpr>(q_add->rhs.get());
  ASSERT_NE(bq, nullptr);
  EXPECT_EQ(dyn_cast<NameExpr>(bq->base.get())->resolved, NameKind::LayerWeight);
  EXPECT_EQ(dyn_cast<NameExpr>(bq->base.get())->weight, m->find_weight("bq"));
  EXPECT_EQ(dyn_cast<NameExpr>(bq->index.get())->resolved, NameKind::LayerIndex);

  const auto* ret = dyn_cast<ReturnStmt>(body[3].get());
  ASSERT_NE(ret, nullptr);
  EXPECT_EQ(to_string(ret->value->type), "f32[1, n_vocab]");

  // Every weight is used.
  for (const auto& w : m->weights) EXPECT_TRUE(w->used) << w->name;
  for (const auto& w : m->layer_weights->weights) EXPECT_TRUE(w->used) << w->name;
}

TEST(Frontend, Qwen2DumpShowsTypedStatements) {
  auto m = check_clean("dsl/qwen2.dsl");
  ASSERT_NE(m, nullptr);
  std::string dump = ast::dump(*m);
  EXPECT_NE(dump.find("    weight wq : any[n_embd, n_embd] = \"blk.{i}.attn_q.weight\" @33:3\n"), std::string::npos);
  EXPECT_NE(dump.find("  param rope_base : float = key(\"{arch}.rope.freq_base\", default = 10000.0) @15:1\n"),
            std::string::npos);
  EXPECT_NE(dump.find("      x (carried) = x + matmul(a, wo[l]) : f32[N, n_embd] @59:5\n"), std::string::npos);
  EXPECT_NE(dump.find("    return matmul(h, output) : f32[1, n_vocab] @65:3\n"), std::string::npos);
}

TEST(Frontend, LlamaChecksClean) {
  auto m = check_clean("dsl/llama.dsl");
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->arch, "llama");
  EXPECT_EQ(m->find_param("rms_eps")->resolved_key, "llama.attention.layer_norm_rms_epsilon");
  EXPECT_EQ(m->find_weight("bq"), nullptr);  // no biases
  ASSERT_NE(m->layer_weights, nullptr);
  EXPECT_EQ(m->layer_weights->weights.size(), 9u);
  const auto* loop = dyn_cast<ForStmt>(m->forward->body[1].get());
  ASSERT_NE(loop, nullptr);
  const auto* rope = call(dyn_cast<AssignStmt>(loop->body[1].get())->value.get());
  ASSERT_NE(rope, nullptr);
  EXPECT_EQ(to_string(*rope->find("mode")), "normal");
}

TEST(Frontend, LlamaTakesOptionalRopeFrequencyFactors) {
  auto m = check_clean("dsl/llama.dsl");
  ASSERT_NE(m, nullptr);
  const WeightDecl* freqs = m->find_weight("rope_freqs");
  ASSERT_NE(freqs, nullptr);
  EXPECT_TRUE(freqs->optional);
  EXPECT_TRUE(freqs->used);
}

TEST(Frontend, Qwen3AndGemma2CheckClean) {
  auto qwen3 = check_clean("dsl/qwen3.dsl");
  ASSERT_NE(qwen3, nullptr);
  EXPECT_EQ(qwen3->arch, "qwen3");
  EXPECT_EQ(qwen3->find_param("head_dim")->resolved_key, "qwen3.attention.key_length");
  auto gemma2 = check_clean("dsl/gemma2.dsl");
  ASSERT_NE(gemma2, nullptr);
  EXPECT_EQ(gemma2->arch, "gemma2");
  EXPECT_EQ(gemma2->find_param("window")->resolved_key, "gemma2.attention.sliding_window");
}

std::unique_ptr<Module> check_text(const std::string& text, DiagnosticEngine& d) {
  return parse_and_check("t.dsl", text, d);
}

const char* kHeads = R"(model t
param n_embd : int = key("{arch}.embedding_length")
param n_head : int = key("{arch}.attention.head_count")
let head_dim = n_embd / n_head
check head_dim % 2 == 0 : "rope needs an even head_dim"
CHECK
weight w : q8_0[n_embd, n_embd] = "w.weight"
forward(tokens : i32[N]) -> f32[1, n_embd] {
  x = embed(w, tokens)
  q = rope(x, heads = n_head, dim = head_dim)
  return matmul(last(q), w)
}
)";

// rms_norm(x, w, eps, heads = H) normalizes each of H groups of a row with
// the same weight: x's width must be H times the weight's.
TEST(Frontend, PerHeadRmsNormNeedsHeadsTimesTheWeightWidth) {
  const std::string program = R"(model m
param n : int = key("n")
param h : int = key("h")
param d : int = key("d")
param v : int = key("v")
weight e : q8_0[v, n] = "e"
weight wq : q8_0[h * d, n] = "wq"
weight wn : f32[WIDTH] = "wn"
forward(tokens : i32[N]) -> f32[1, h * d] {
  q = rms_norm(matmul(embed(e, tokens), wq), wn, 1e-6, heads = h)
  return last(q)
}
)";
  const size_t at = program.find("WIDTH");
  const std::string good = program.substr(0, at) + "d" + program.substr(at + 5);
  const std::string bad = program.substr(0, at) + "n" + program.substr(at + 5);
  DiagnosticEngine ok, wrong;
  EXPECT_NE(check_text(good, ok), nullptr);
  EXPECT_EQ(ok.format(), "");
  EXPECT_EQ(check_text(bad, wrong), nullptr);
  EXPECT_NE(wrong.format().find("rms_norm weight must be f32[D] with h * D = h * d"), std::string::npos) << wrong.format();
}

// heads * dim equals the row length only because the program checks the
// divisibility: shapes are compared under the declared checks.
TEST(Frontend, ChecksMakeSymbolicShapesEqual) {
  std::string with_check = kHeads;
  with_check.replace(with_check.find("CHECK"), 5, "check n_embd % n_head == 0 : \"divisible\"");
  DiagnosticEngine ok;
  EXPECT_NE(check_text(with_check, ok), nullptr);
  EXPECT_EQ(ok.format(), "");

  std::string without_check = kHeads;
  without_check.replace(without_check.find("CHECK"), 5, "");
  DiagnosticEngine bad;
  EXPECT_EQ(check_text(without_check, bad), nullptr);
  ASSERT_EQ(bad.error_count(), 1);
  EXPECT_EQ(bad.diagnostics()[0].message,
            "'rope': the row length n_embd of f32[N, n_embd] is not heads * dim (n_head * head_dim) (equal only if "
            "n_embd % n_head == 0: add a check)");
}

TEST(Frontend, ArgumentsBindByPositionOrKeyword) {
  std::string text = kHeads;
  text.replace(text.find("CHECK"), 5, "check n_embd % n_head == 0 : \"divisible\"");
  std::string keywords = "rope(x, heads = n_head, dim = head_dim)";
  text.replace(text.find(keywords), keywords.size(), "rope(x, n_head, head_dim, mode = normal)");
  DiagnosticEngine d;
  auto m = check_text(text, d);
  ASSERT_NE(m, nullptr) << d.format();
  const auto* rope = call(dyn_cast<AssignStmt>(m->forward->body[1].get())->value.get());
  ASSERT_NE(rope, nullptr);
  EXPECT_EQ(to_string(*rope->find("x")), "x");
  EXPECT_EQ(to_string(*rope->find("heads")), "n_head");
  EXPECT_EQ(to_string(*rope->find("dim")), "head_dim");
  EXPECT_EQ(to_string(*rope->find("mode")), "normal");
  EXPECT_EQ(rope->find("base"), nullptr);
}

TEST(Frontend, ExpressionPrinterKeepsMeaning) {
  DiagnosticEngine d;
  std::string text = "model t\nlet a = 1\nlet b = (a + 2) * 3 - (a - (2 - a)) / -a\nlet c = !(a < 2 && b >= 1) || a == 2\n";
  auto tokens = lex("p.dsl", text, d);
  auto m = parse("p.dsl", tokens, d);
  ASSERT_EQ(d.format(), "");
  ASSERT_EQ(m->params.size(), 3u);
  EXPECT_EQ(to_string(*m->params[1]->value), "(a + 2) * 3 - (a - (2 - a)) / -a");
  EXPECT_EQ(to_string(*m->params[2]->value), "!(a < 2 && b >= 1) || a == 2");
}

// Each tests/dsl/invalid/NAME.dsl must print exactly NAME.expected. Set
// LUMEN_UPDATE_GOLDEN=1 to rewrite the .expected files (then review them).
TEST(Frontend, InvalidProgramsGiveExactDiagnostics) {
  fs::path dir = fs::path(LUMEN_SOURCE_DIR) / "tests/dsl/invalid";
  std::vector<fs::path> programs;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".dsl") programs.push_back(entry.path());
  }
  std::sort(programs.begin(), programs.end());
  EXPECT_GE(programs.size(), 25u);
  bool update = std::getenv("LUMEN_UPDATE_GOLDEN") != nullptr;
  for (const fs::path& p : programs) {
    SCOPED_TRACE(p.filename().string());
    DiagnosticEngine d;
    auto m = parse_and_check(p.filename().string(), read_file(p), d);
    std::string printed = d.format();
    fs::path expected_path = p;
    expected_path.replace_extension(".expected");
    if (update) std::ofstream(expected_path, std::ios::binary) << printed;
    ASSERT_TRUE(fs::exists(expected_path)) << "missing " << expected_path;
    EXPECT_EQ(printed, read_file(expected_path));
    EXPECT_FALSE(printed.empty());
    // A module comes back exactly when there were no errors.
    EXPECT_EQ(m == nullptr, d.has_errors());
  }
}

TEST(Frontend, SeveralErrorsAreReportedInOneRun) {
  DiagnosticEngine d;
  std::string text = read_file(fs::path(LUMEN_SOURCE_DIR) / "tests/dsl/invalid/several_syntax_errors.dsl");
  EXPECT_EQ(parse_and_check("s.dsl", text, d), nullptr);
  EXPECT_EQ(d.error_count(), 4);
}

TEST(Frontend, UnreadableFileIsADiagnostic) {
  DiagnosticEngine d;
  EXPECT_EQ(parse_and_check_file(std::string(LUMEN_BINARY_DIR) + "/no/such/file.dsl", d), nullptr);
  ASSERT_EQ(d.error_count(), 1);
  EXPECT_EQ(d.diagnostics()[0].message, "cannot open file");
}

TEST(Frontend, DeepNestingIsAnErrorNotACrash) {
  for (const char* open : {"(", "-", "silu(", "!"}) {
    std::string text = "model x\nlet y = ";
    for (int i = 0; i < 5000; ++i) text += open;
    DiagnosticEngine d;
    EXPECT_EQ(parse_and_check("deep.dsl", text, d), nullptr);
    ASSERT_GE(d.error_count(), 1);
    EXPECT_NE(d.diagnostics()[0].message.find("nested too deeply"), std::string::npos) << open;
  }
  // A long flat chain is deep as a tree: bounded too.
  std::string chain = "model x\nlet y = 1";
  for (int i = 0; i < 5000; ++i) chain += " + 1";
  DiagnosticEngine d;
  EXPECT_EQ(parse_and_check("chain.dsl", chain, d), nullptr);
  EXPECT_NE(d.format().find("nested too deeply"), std::string::npos);
}

TEST(Frontend, NestingWithinTheLimitIsAccepted) {
  std::string text = "model x\nlet y = ";
  int depth = kMaxExprDepth / 2;
  for (int i = 0; i < depth; ++i) text += "(";
  text += "1";
  for (int i = 0; i < depth; ++i) text += ")";
  text += "\n";
  DiagnosticEngine d;
  parse_and_check("ok.dsl", text, d);
  EXPECT_EQ(d.format().find("nested too deeply"), std::string::npos);
}

TEST(Frontend, ManyErrorsStopAtALimit) {
  std::string text = "model x\n";
  for (int i = 0; i < 1000; ++i) text += "let = \n";
  DiagnosticEngine d;
  EXPECT_EQ(parse_and_check("many.dsl", text, d), nullptr);
  EXPECT_LE(d.error_count(), 60);
  EXPECT_NE(d.format().find("too many errors"), std::string::npos);
}

// Every prefix of qwen2.dsl (cut at each line) and a set of byte mutations
// must give diagnostics or a module, never a crash. A cheap stand-in for
// the fuzzer in the ordinary test run.
TEST(Frontend, PrefixesAndMutationsOfQwen2NeverCrash) {
  std::string text = read_file(fs::path(LUMEN_SOURCE_DIR) / "dsl/qwen2.dsl");
  ASSERT_FALSE(text.empty());
  for (size_t cut = text.find('\n'); cut != std::string::npos; cut = text.find('\n', cut + 1)) {
    DiagnosticEngine d;
    auto m = parse_and_check("prefix.dsl", text.substr(0, cut), d);
    EXPECT_EQ(m == nullptr, d.has_errors());
  }
  const char replacements[] = {'(', ')', '{', '}', '[', ']', '"', '#', '=', ',', ':', 'x', '0', '\n', '\\'};
  uint32_t state = 12345;
  for (int i = 0; i < 300; ++i) {
    state = state * 1103515245u + 12345u;
    std::string mutated = text;
    mutated[(state >> 8) % mutated.size()] = replacements[(state >> 20) % sizeof replacements];
    DiagnosticEngine d;
    auto m = parse_and_check("mutated.dsl", mutated, d);
    EXPECT_EQ(m == nullptr, d.has_errors());
  }
}

}  // namespace
}  // namespace lumen::dsl
