// The JSON parser: every value kind, escapes (surrogate pairs included),
// checked accessors, and clear errors with line/column for malformed input,
// including nesting deep enough to overflow a naive parser's stack.
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

TEST(Json, MalformedInputHasLineAndColumn) {
  auto error_of = [](std::string_view text) -> std::string {
    try {
      (void)parse(text);
    } catch (const Error& e) {
      return e.what();
    }
    return "accepted";
  };
  EXPECT_EQ(error_of("{\n  \"a\": 1,\n}"), "line 3, column 1: expected a member name");
  EXPECT_EQ(error_of("[1 2]"), "line 1, column 4: expected ']'");
  EXPECT_EQ(error_of("\"abc"), "line 1, column 5: unterminated string");
  EXPECT_EQ(error_of("\"a\nb\""), "line 1, column 3: control character in string");
  EXPECT_EQ(error_of("\"\\x\""), "line 1, column 3: invalid escape");
  EXPECT_EQ(error_of("\"\\ud800\""), "line 1, column 8: unpaired high surrogate");
  EXPECT_EQ(error_of("\"\\udc00\""), "line 1, column 8: unpaired low surrogate");
  EXPECT_EQ(error_of("\"\\u12zz\""), "line 1, column 6: invalid hex digit in \\u escape");
  EXPECT_EQ(error_of("\"\\u12\""), "line 1, column 4: truncated \\u escape");
  EXPECT_EQ(error_of("01"), "line 1, column 2: unexpected text after the JSON value");
  EXPECT_EQ(error_of("-"), "line 1, column 1: invalid value");
  EXPECT_EQ(error_of("1."), "line 1, column 3: expected digits after '.'");
  EXPECT_EQ(error_of("1e400"), "line 1, column 6: number out of range");
  EXPECT_EQ(error_of("tru"), "line 1, column 1: invalid literal");
  EXPECT_EQ(error_of(""), "line 1, column 1: unexpected end of input");
  EXPECT_EQ(error_of("{\"a\" 1}"), "line 1, column 6: expected ':'");
  EXPECT_EQ(error_of("NaN"), "line 1, column 1: invalid value");
  EXPECT_EQ(error_of(std::string(100000, '[')), "line 1, column 514: nesting too deep");
}

}  // namespace
}  // namespace lumen::json
