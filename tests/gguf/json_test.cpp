// json::parse (nlohmann-json underneath): every value kind, escapes (surrogate
// pairs included), checked accessors, and one-line errors with line/column for
// malformed input, including nesting deep enough to overflow a naive parser's stack.
#include <gtest/gtest.h>

#include "lumen/gguf/json.h"

namespace lumen::json {
namespace {

TEST(Json, ParsesEveryKind) {
  const Value v = parse(R"( {"n": null, "t": true, "f": false, "i": -12, "x": 1.5e3, "s": "hi",
                            "a": [1, [2, {}], []], "o": {"k": "v"}} )");
  EXPECT_TRUE(v.find("n")->is_null());
  EXPECT_TRUE(v.find("t")->as_bool());
  EXPECT_FALSE(v.find("f")->as_bool());
  EXPECT_EQ(v.find("i")->as_int(), -12);
  EXPECT_EQ(v.find("x")->as_number(), 1500.0);
  EXPECT_EQ(v.find("s")->as_string(), "hi");
  const Array& a = v.find("a")->as_array();
  ASSERT_EQ(a.size(), 3u);
  EXPECT_EQ(a[1].as_array()[0].as_int(), 2);
  EXPECT_TRUE(a[1].as_array()[1].as_object().empty());
  EXPECT_TRUE(a[2].as_array().empty());
  EXPECT_EQ(v.find("o")->find("k")->as_string(), "v");
  EXPECT_EQ(v.find("missing"), nullptr);
  EXPECT_EQ(v.as_object()[0].first, "n");  // file order is kept
}

TEST(Json, StringEscapes) {
  EXPECT_EQ(parse(R"("a\"b\\c\/d\b\f\n\r\t")").as_string(), "a\"b\\c/d\b\f\n\r\t");
  EXPECT_EQ(parse(R"("\u0120\u00e9")").as_string(), "Ġé");
  EXPECT_EQ(parse(R"("\ud83d\ude80")").as_string(), "🚀");
  EXPECT_EQ(parse("\"raw 🚀 ñ\"").as_string(), "raw 🚀 ñ");
}

TEST(Json, CheckedAccessors) {
  EXPECT_THROW(parse("1.5").as_int(), Error);
  EXPECT_THROW(parse("1e300").as_int(), Error);
  EXPECT_THROW(parse("\"x\"").as_number(), Error);
  EXPECT_THROW(parse("[]").as_object(), Error);
  EXPECT_THROW(parse("[]").find("k"), Error);
  EXPECT_EQ(parse("9007199254740992").as_int(), 9007199254740992ll);
  EXPECT_EQ(parse("-0.5e-1").as_number(), -0.05);
  EXPECT_EQ(parse("1e-400").as_number(), 0.0);  // underflow is zero, not an error
}

std::string error_of(std::string_view text) {
  try {
    (void)parse(text);
  } catch (const Error& e) {
    return e.what();
  }
  return "accepted";
}

// The wording after the location is nlohmann-json's; the location, the one
// line and the gist are ours to keep.
TEST(Json, MalformedInputHasLineAndColumn) {
  const struct {
    std::string text;
    std::string location;
    std::string gist;
  } cases[] = {
      {"{\n  \"a\": 1,\n}", "line 3, column 1: ", "expected string literal"},
      {"[1 2]", "line 1, column 4: ", "expected ']'"},
      {"\"abc", "line 1, column 5: ", "missing closing quote"},
      {"\"a\nb\"", "line 1, column 3: ", "control character U+000A (LF) must be escaped"},
      {"\"\\x\"", "line 1, column 3: ", "forbidden character after backslash"},
      {"\"\\ud800\"", "line 1, column 8: ", "surrogate U+D800..U+DBFF must be followed by U+DC00..U+DFFF"},
      {"\"\\udc00\"", "line 1, column 7: ", "surrogate U+DC00..U+DFFF must follow U+D800..U+DBFF"},
      {"\"\\u12zz\"", "line 1, column 6: ", "'\\u' must be followed by 4 hex digits"},
      {"01", "line 1, column 2: ", "expected end of input"},
      {"-", "line 1, column 2: ", "invalid number"},
      {"1.", "line 1, column 3: ", "expected digit after '.'"},
      {"1e400", "line 1, column 5: ", "number overflow parsing '1e400'"},
      {"tru", "line 1, column 4: ", "invalid literal"},
      {"", "line 1, column 1: ", "unexpected end of input"},
      {"{\"a\" 1}", "line 1, column 6: ", "expected ':'"},
      {"NaN", "line 1, column 1: ", "invalid literal"},
      {"[1,]", "line 1, column 4: ", "unexpected ']'"},
      {"{\"a\": 1 // comment\n}", "line 1, column 9: ", "invalid literal"},
  };
  for (const auto& c : cases) {
    const std::string error = error_of(c.text);
    EXPECT_EQ(error.rfind(c.location, 0), 0u) << c.text << " -> " << error;
    EXPECT_NE(error.find(c.gist), std::string::npos) << c.text << " -> " << error;
    EXPECT_EQ(error.find('\n'), std::string::npos) << c.text << " -> " << error;
  }
}

TEST(Json, IllFormedUtf8IsRejectedWithAPrintableMessage) {
  const std::string error = error_of("[\"ok\", \"\xff\"]");
  EXPECT_EQ(error.rfind("line 1, column 9: ", 0), 0u) << error;
  EXPECT_NE(error.find("ill-formed UTF-8 byte"), std::string::npos) << error;
  EXPECT_NE(error.find("\\xFF"), std::string::npos) << error;
  for (char c : error) EXPECT_LT(static_cast<unsigned char>(c), 0x80) << error;
}

TEST(Json, NestingBeyondTheLimitIsAnErrorNotACrash) {
  EXPECT_EQ(error_of(std::string(100000, '[')), "JSON nesting deeper than 512 levels");
  const std::string deepest = std::string(kMaxDepth + 1, '[') + std::string(kMaxDepth + 1, ']');
  EXPECT_EQ(parse(deepest).as_array().size(), 1u);
  EXPECT_EQ(error_of("[" + deepest + "]"), "JSON nesting deeper than 512 levels");
}

}  // namespace
}  // namespace lumen::json
