// Tests of the scheduled program helpers: evaluating its sizes for resolved
// hparams (the sizes themselves: tests/ops/dim_test.cpp), enum names, and the
// text format (round trip of the hand-written qwen2 program, rejection of
// malformed input with a line number, no crash on mutated input).
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "lumen/program/program.h"

namespace lumen::program {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string qwen2_text() { return read_text(LUMEN_SOURCE_DIR "/tests/data/qwen2.program"); }

Dim hp(const char* name) { return Dim::param(name); }
Dim c(int64_t v) { return Dim::constant(v); }

TEST(HParamValues, EvaluateSizesByNameWithFloatsTruncated) {
  std::vector<HParam> hparams(3);
  hparams[0].name = "a";
  hparams[1].name = "f";
  hparams[1].kind = HParam::Kind::Float;
  hparams[2].name = "later";
  std::vector<double> values = {7.0, 2.9, std::nan("")};
  HParamValues v(hparams, values);
  EXPECT_EQ(v.eval(hp("a") * Dim::tokens() + c(3), 5), 38);
  EXPECT_EQ(v.eval(max(hp("f"), c(1)), 1), 2);  // 2.9 truncates to 2
  EXPECT_EQ(v.eval(c(-7) / hp("a"), 1), -1);
  EXPECT_THROW(v.eval(hp("later"), 1), ops::DimError);   // not resolved yet
  EXPECT_THROW(v.eval(hp("nobody"), 1), ops::DimError);  // no such hparam
  EXPECT_THROW(v.eval(c(1) / (hp("a") - c(7)), 1), ops::DimError);
  values[2] = 1e300;  // kept by reference; not an int64
  EXPECT_THROW(v.eval(hp("later"), 1), ops::DimError);
  values[2] = 4;
  EXPECT_EQ(v.eval(hp("later") % c(3), 1), 1);
}

TEST(Names, TheProgramTextSpellsTheListsEnumerators) {
  EXPECT_STREQ(lumen::ops::id_name(OpId::RmsNormQuant), "RmsNormQuant");
  EXPECT_STREQ(lumen::ops::id_name(OpId::Last), "Last");
  EXPECT_STREQ(lumen::ops::id_name(DType::Q8_0), "Q8_0");
  EXPECT_STREQ(to_string(Epilogue::BiasResidual), "bias_residual");
  // model.so's kernel table stores an epilogue by its value: the order is ABI.
  EXPECT_EQ(static_cast<int>(Epilogue::SiluMul), 4);
}

TEST(Serialize, Qwen2ProgramParsesWithTheExpectedStructure) {
  Program p = deserialize(qwen2_text());
  EXPECT_EQ(p.arch, "qwen2");
  EXPECT_EQ(p.hparams.size(), 11u);
  EXPECT_EQ(p.weights.size(), 15u);
  EXPECT_EQ(p.buffers.size(), 11u);
  ASSERT_EQ(p.pre.size(), 1u);
  ASSERT_EQ(p.layer.size(), 11u);
  ASSERT_EQ(p.post.size(), 3u);
  EXPECT_EQ(p.layer[1].kind, OpId::MatMul);
  EXPECT_EQ(p.layer[1].weights.size(), 3u);
  EXPECT_EQ(p.layer[1].epilogue, Epilogue::Bias);
  EXPECT_EQ(p.layer[1].schedule.formats[0].prefill_kernel, KernelId::gemm(Epilogue::Bias, 48, 4));
  EXPECT_EQ(p.layer[1].schedule.formats[0].decode_kernel, KernelId::gemv(Epilogue::Bias));
  EXPECT_EQ(p.layer[1].schedule.formats[0].batch_kernel, KernelId::batch(Epilogue::Bias));
  EXPECT_EQ(p.layer[4].kind, OpId::Attention);
  EXPECT_EQ(p.layer[4].inputs.size(), 3u);
  EXPECT_EQ(p.post[2].output.buffer, p.logits_buffer);

  // Qwen2.5-0.5B sizes: every buffer offset is 64-byte aligned for any N and
  // buffers do not overlap the arena end.
  std::vector<double> values = {151936, 32768, 896, 24, 4864, 14, 2, 1e6, 1e-6, 64, 128};
  ASSERT_EQ(values.size(), p.hparams.size());
  HParamValues hv(p.hparams, values);
  for (int64_t n : {1, 7, 512}) {
    int64_t arena = hv.eval(p.arena_bytes, n);
    for (const Buffer& b : p.buffers) {
      int64_t off = hv.eval(b.offset, n);
      EXPECT_EQ(off % 64, 0) << b.name;
      EXPECT_LE(off, arena) << b.name;
    }
  }
  EXPECT_EQ(hv.eval(*p.hparams[9].derived, 1), 64);
}

TEST(Serialize, RoundTripIsExact) {
  Program p = deserialize(qwen2_text());
  std::string once = serialize(p);
  Program again = deserialize(once);
  EXPECT_EQ(serialize(again), once);
}

TEST(Serialize, OddNamesRoundTripThroughIndicesAndSizesNameHParams) {
  Program p;
  p.arch = "we\"ird\n\tarch";
  p.hparams.push_back(HParam{"dup", "k.a", HParam::Kind::Int, true, std::nullopt, std::nullopt, 1.0, 2.5});
  p.hparams.push_back(HParam{"dup", "", HParam::Kind::Float, false, 0.1, std::nullopt, std::nullopt, std::nullopt});
  p.hparams.push_back(HParam{"has space", "k.b", HParam::Kind::Int, false, 3.0, std::nullopt, std::nullopt,
                             std::nullopt});
  p.hparams.push_back(HParam{"n", "k.n", HParam::Kind::Int, true, std::nullopt, std::nullopt, std::nullopt,
                             std::nullopt});
  p.hparams.push_back(HParam{"m", "", HParam::Kind::Int, false, std::nullopt, hp("n") * c(2), std::nullopt,
                             std::nullopt});
  p.buffers.push_back(Buffer{"N", DType::F32, Dim::tokens(), hp("m") + hp("n"), c(0)});
  p.weights.push_back(Weight{"w", "blk.{i}.w", true, {DType::Q8_0, DType::F32}, {hp("n"), max(hp("m"), c(-9))}, "fb"});
  p.tokens_buffer = 0;
  p.n_layers = hp("n") % c(3);
  Op op;
  op.kind = OpId::Mul;
  op.inputs = {View{0, c(1), hp("n") - c(1)}, View{}};
  op.weights = {0};
  op.eps_hparam = 1;  // an ambiguous name: referred to by index
  op.line = 12;
  p.post.push_back(op);
  std::string text = serialize(p);
  EXPECT_NE(text.find(" in=\"#0[1:n - 1]|_\""), std::string::npos) << text;  // sizes with blanks are quoted
  Program back = deserialize(text);
  EXPECT_EQ(back.arch, p.arch);
  ASSERT_TRUE(back.hparams[4].derived.has_value());
  EXPECT_TRUE(*back.hparams[4].derived == hp("n") * c(2));
  EXPECT_TRUE(back.weights[0].shape[1] == max(hp("m"), c(-9)));
  EXPECT_EQ(back.hparams[0].max_value, 2.5);
  ASSERT_EQ(back.post.size(), 1u);
  EXPECT_EQ(back.post[0].inputs.size(), 2u);
  EXPECT_TRUE(back.post[0].inputs[0].cols == hp("n") - c(1));
  EXPECT_EQ(back.post[0].inputs[1].buffer, -1);
  EXPECT_EQ(back.post[0].eps_hparam, 1);
  EXPECT_EQ(back.post[0].line, 12);
  EXPECT_EQ(serialize(back), text);
  // A size cannot name an hparam that its name does not pick out.
  p.n_layers = hp("dup");
  EXPECT_THROW(serialize(p), std::invalid_argument);
}

TEST(Serialize, SoftmaxOpRoundTrips) {
  Program p;
  p.arch = "a";
  p.buffers.push_back(Buffer{"x", DType::F32, Dim::tokens(), c(5), c(0)});
  p.buffers.push_back(Buffer{"y", DType::F32, Dim::tokens(), c(5), c(64)});
  Op op;
  op.kind = OpId::Softmax;
  op.inputs = {View{0, c(0), c(5)}};
  op.output = View{1, c(0), c(5)};
  op.line = 3;
  p.post.push_back(op);
  std::string text = serialize(p);
  EXPECT_NE(text.find("post op=Softmax in=x out=y line=3\n"), std::string::npos) << text;
  Program back = deserialize(text);
  ASSERT_EQ(back.post.size(), 1u);
  EXPECT_EQ(back.post[0].kind, OpId::Softmax);
  EXPECT_EQ(back.post[0].inputs.size(), 1u);
  EXPECT_EQ(back.post[0].inputs[0].buffer, 0);
  EXPECT_EQ(back.post[0].output.buffer, 1);
  EXPECT_EQ(serialize(back), text);
}

struct Malformed {
  std::string text;
  std::string message;  // expected substring
};

TEST(Deserialize, RejectsMalformedInputNamingTheLine) {
  const std::string head = "lumen-program 3\nprogram arch=\"a\" source=\"s\" tokens=_ logits=_ n_layers=1 "
                           "n_ctx_train=1 kv_dim=1 arena_bytes=1\n";
  std::vector<Malformed> cases = {
      {"", "header"},
      {"lumen-program 1\n", "line 1: expected the header"},  // version 1 had tile_m, tile_n, optional
      {"lumen-program 2\n", "line 1: expected the header"},  // version 2 had sizes fully parenthesized, by index
      {"lumen-program 3\n", "missing the 'program' record"},
      {head + "bogus x=1\n", "line 3: unknown record 'bogus'"},
      {head + "hparam name=\"a\" key=\"\" kind=int required=1 default=_ derived=_ min=_\n",
       "line 3: missing field 'max'"},
      {head + "hparam name=\"a\" key=\"\" kind=int required=2 default=_ derived=_ min=_ max=_\n",
       "line 3: expected 0 or 1"},
      {head + "hparam name=\"a\" key=\"\" kind=int required=1 default=1x derived=_ min=_ max=_\n",
       "line 3: expected a number"},
      {head + "check lhs=(1+ cmp=eq rhs=0 message=\"m\"\n", "line 3: in expression"},
      {head + "check lhs=((((1 cmp=eq rhs=0 message=\"m\"\n", "expected ')'"},
      {head + "check lhs=foo cmp=eq rhs=0 message=\"m\"\n", "line 3: unknown hparam 'foo'"},
      {head + "check lhs=\"2 * (1\" cmp=eq rhs=0 message=\"m\"\n", "line 3: in expression '2 * (1' of 'lhs': expected ')'"},
      {head + "check lhs=#0 cmp=eq rhs=0 message=\"m\"\n", "line 3: in expression '#0'"},
      {head + "check lhs=1 cmp=approx rhs=0 message=\"m\"\n", "unknown comparison"},
      {head + "check lhs=99999999999999999999 cmp=eq rhs=0 message=\"m\"\n", "out of range"},
      {head + "check lhs=1 cmp=eq rhs=0 message=\"unterminated\n", "unterminated string"},
      {head + "check lhs=1 cmp=eq rhs=0 message=\"bad\\q\"\n", "unknown escape"},
      {head + "check lhs=1 cmp=eq rhs=0 message=\"m\" extra=1\n", "unknown field 'extra'"},
      {head + "check lhs=1 lhs=2 cmp=eq rhs=0 message=\"m\"\n", "duplicate field 'lhs'"},
      {head + "check lhs=1 cmp=eq rhs=0 message\n", "expected key=value"},
      {head + "post op=Explode\n", "line 3: unknown op 'Explode'"},
      {head + "post op=softmax\n", "line 3: unknown op 'softmax'"},  // names are case-sensitive
      {head + "post op=Add in=nowhere\n", "unknown buffer 'nowhere'"},
      {head + "post op=Add in=#7\n", "out of range"},
      {head + "buffer name=\"b\" dtype=F32 rows=N cols=1 offset=0\npost op=Add in=b[0:1\n", "malformed view"},
      {head + "buffer name=\"b\" dtype=F99 rows=N cols=1 offset=0\n", "line 3: unknown dtype 'F99'"},
      {head + "buffer name=\"b\" dtype=Q8_0 rows=N cols=32 offset=0\n", "line 3: a buffer cannot hold Q8_0"},
      {head + "weight name=\"w\" gguf=\"w\" per_layer=0 dtypes=F32,ActQ8 shape=_ fallback=\"\"\n",
       "line 3: a weight cannot be ActQ8"},
      {head + "post op=View\n", "line 3: unknown op 'View'"},  // the list's op that is not in the program
      {head + "post op=MatMul weights=ghost\n", "unknown weight 'ghost'"},
      {head + "post op=MatMul rows_per_task=sixteen\n", "expected an integer"},
      {head + "post op=MatMul prefill_kernel=\"gemm.none.m17n4\"\n", "bad kernel 'gemm.none.m17n4'"},
      {head + "post op=MatMul tile_m=16\n", "unknown field 'tile_m'"},
      {head + "post op=MatMul decode_kernel=\"gemm.none.m16n4\"\n",
       "line 3: decode_kernel 'gemm.none.m16n4' is not a gemv kernel"},
      {head + "post op=MatMul epilogue=bias decode_kernel=\"gemv.bias\" batch_kernel=\"batch.none\"\n",
       "batch_kernel 'batch.none' is not a batch kernel with the op's epilogue 'bias'"},
      {head + "post op=Rope rope_mode=sideways\n", "unknown rope mode"},
      {head + head.substr(16), "a second 'program' record"},
      {head + "hparam key=\"k\"\n", "missing field 'name'"},
  };
  std::string deep = "lumen-program 3\nprogram arch=\"a\" source=\"s\" tokens=_ logits=_ n_layers=" +
                     std::string(5000, '(') + "1" + std::string(5000, ')') +
                     " n_ctx_train=1 kv_dim=1 arena_bytes=1\n";
  cases.push_back({deep, "nested too deeply"});
  for (const Malformed& c : cases) {
    try {
      deserialize(c.text);
      ADD_FAILURE() << "accepted: " << c.text;
    } catch (const ParseError& e) {
      EXPECT_NE(std::string(e.what()).find(c.message), std::string::npos)
          << "message: " << e.what() << "\nwanted: " << c.message;
    }
  }
}

// Random byte edits of a valid program: each either parses or is a ParseError.
TEST(Deserialize, MutatedInputNeverCrashes) {
  const std::string base = serialize(deserialize(qwen2_text()));
  std::mt19937 rng(1234);
  const std::string alphabet = "()[]:|,=\"\\#_N+-*/%0123456789 \nabxyz";
  int parsed = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string text = base;
    int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      size_t pos = rng() % text.size();
      switch (rng() % 3) {
        case 0: text[pos] = alphabet[rng() % alphabet.size()]; break;
        case 1: text.erase(pos, 1 + rng() % 8); break;
        default: text.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
      }
    }
    try {
      Program p = deserialize(text);
      ++parsed;
      (void)serialize(p);
    } catch (const ParseError&) {
    } catch (const std::invalid_argument&) {
      // serialize() refusing a program it cannot spell is fine; a crash is not.
    }
  }
  EXPECT_GT(parsed, 0);
}

}  // namespace
}  // namespace lumen::program
