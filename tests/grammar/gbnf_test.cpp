// The GBNF parser: every construct (checked through what the grammar
// accepts), every error with its line:col, and the limits.
#include <gtest/gtest.h>

#include <string>

#include "lumen/grammar/grammar.h"

namespace lumen::grammar {
namespace {

// Whether the grammar matches the whole text.
bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text);

class NoVocab {
 public:
  static std::shared_ptr<const TokenTrie> trie() {
    static const std::shared_ptr<const TokenTrie> t = [] {
      Vocabulary v;
      v.tokens = {"a"};
      return TokenTrie::build(Tokenizer::from_vocabulary(v));
    }();
    return t;
  }
};

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, NoVocab::trie());
  return m.accept_bytes(text) && m.accepting();
}

bool prefix(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, NoVocab::trie());
  return m.accept_bytes(text);
}

std::string error_of(std::string_view gbnf) {
  try {
    Grammar::parse(gbnf);
  } catch (const GrammarError& e) {
    return e.what();
  }
  return "(no error)";
}

TEST(Gbnf, LiteralsAlternativesAndGroups) {
  auto g = Grammar::parse("root ::= \"ab\" | \"c\" (\"d\" | \"e\") x\nx ::= \"!\"");
  EXPECT_TRUE(matches(g, "ab"));
  EXPECT_TRUE(matches(g, "cd!"));
  EXPECT_TRUE(matches(g, "ce!"));
  EXPECT_FALSE(matches(g, "c"));
  EXPECT_TRUE(prefix(g, "c"));
  EXPECT_FALSE(prefix(g, "cf"));
  EXPECT_FALSE(matches(g, "abab"));
}

TEST(Gbnf, Escapes) {
  auto g = Grammar::parse(R"(root ::= "\n\t\r\\\"\[\]" "\x41" "\u00e9" "\U0001F600" [\-\^])");
  EXPECT_TRUE(matches(g, "\n\t\r\\\"[]A\xc3\xa9\xf0\x9f\x98\x80-"));
  EXPECT_TRUE(matches(g, "\n\t\r\\\"[]A\xc3\xa9\xf0\x9f\x98\x80^"));
}

TEST(Gbnf, CharacterClasses) {
  auto g = Grammar::parse("root ::= [a-cx] [^a-z] [é-ë]");
  EXPECT_TRUE(matches(g, "aA\xc3\xa9"));
  EXPECT_TRUE(matches(g, "x\xe2\x82\xac\xc3\xab"));  // € is not in a-z
  EXPECT_FALSE(matches(g, "dA\xc3\xa9"));
  EXPECT_FALSE(matches(g, "ab\xc3\xa9"));
  EXPECT_FALSE(matches(g, "aA\xc3\xac"));
  // A character split across two calls: the matcher sits inside its bytes.
  Matcher m(g, NoVocab::trie());
  EXPECT_TRUE(m.accept_bytes("a\xe2\x82"));
  EXPECT_FALSE(m.accept_bytes("A"));
  EXPECT_TRUE(m.accept_bytes("\xac\xc3"));
  EXPECT_TRUE(m.accept_bytes("\xa9"));
  EXPECT_TRUE(m.accepting());
}

TEST(Gbnf, AnyCharacterIsOneCodePoint) {
  auto g = Grammar::parse("root ::= . \"!\"");
  EXPECT_TRUE(matches(g, "a!"));
  EXPECT_TRUE(matches(g, "\xf0\x9f\x98\x80!"));
  EXPECT_FALSE(matches(g, "ab!"));
  EXPECT_FALSE(prefix(g, "\x80"));          // a continuation byte starts nothing
  EXPECT_FALSE(prefix(g, "\xed\xa0\x80"));  // a surrogate is not a character
  EXPECT_FALSE(prefix(g, "\xc0\x80"));      // nor an overlong form
}

TEST(Gbnf, Repetitions) {
  auto star = Grammar::parse("root ::= \"ab\"*");
  EXPECT_TRUE(matches(star, ""));
  EXPECT_TRUE(matches(star, "abab"));
  EXPECT_FALSE(matches(star, "aba"));
  auto plus = Grammar::parse("root ::= [0-9]+ \";\"");
  EXPECT_FALSE(matches(plus, ";"));
  EXPECT_TRUE(matches(plus, "123;"));
  auto opt = Grammar::parse("root ::= \"a\"? \"b\"");
  EXPECT_TRUE(matches(opt, "b"));
  EXPECT_TRUE(matches(opt, "ab"));
  EXPECT_FALSE(matches(opt, "aab"));
  auto exact = Grammar::parse("root ::= \"x\"{3}");
  EXPECT_FALSE(matches(exact, "xx"));
  EXPECT_TRUE(matches(exact, "xxx"));
  EXPECT_FALSE(prefix(exact, "xxxx"));
  auto at_least = Grammar::parse("root ::= \"x\"{2,}");
  EXPECT_FALSE(matches(at_least, "x"));
  EXPECT_TRUE(matches(at_least, "xxxxx"));
  auto between = Grammar::parse("root ::= (\"x\" | \"y\"){1,3}");
  EXPECT_FALSE(matches(between, ""));
  EXPECT_TRUE(matches(between, "xyx"));
  EXPECT_FALSE(prefix(between, "xyxy"));
  auto zero = Grammar::parse("root ::= \"a\"{0} \"b\"");
  EXPECT_TRUE(matches(zero, "b"));
}

TEST(Gbnf, CommentsNewlinesAndEmptyAlternatives) {
  auto g = Grammar::parse(
      "# a comment\n"
      "root ::= (  # inside a group, newlines are fine\n"
      "  \"a\"\n"
      "  | \"b\" ) tail |\n"
      "  \"c\"\n"
      "\n"
      "tail ::= | \"!\"  # empty first alternative\n");
  EXPECT_TRUE(matches(g, "a"));
  EXPECT_TRUE(matches(g, "b!"));
  EXPECT_TRUE(matches(g, "c"));
  EXPECT_FALSE(matches(g, "c!"));
}

TEST(Gbnf, RightRecursionAndNesting) {
  auto g = Grammar::parse("root ::= \"(\" root \")\" | \"\"");
  EXPECT_TRUE(matches(g, "((()))"));
  EXPECT_FALSE(matches(g, "(()"));
  EXPECT_TRUE(prefix(g, "(()"));
  EXPECT_FALSE(prefix(g, "())"));
  auto list = Grammar::parse("root ::= item (\",\" item)*\nitem ::= [a-z]+");
  std::string long_text = "a";
  for (int i = 0; i < 5000; ++i) long_text += ",bc";  // right recursion: the stack does not grow
  EXPECT_TRUE(matches(list, long_text));
}

TEST(Gbnf, OtherRootName) {
  auto g = Grammar::parse("start ::= \"s\"\nroot ::= \"r\"", "start");
  EXPECT_TRUE(matches(g, "s"));
  EXPECT_FALSE(matches(g, "r"));
}

TEST(Gbnf, ErrorsNameLineAndColumn) {
  EXPECT_EQ(error_of("root ::= \"a\" | ( \"b\""), "1:21: expected ')'");
  EXPECT_EQ(error_of("root ::= x"), "1:10: undefined rule 'x'");
  EXPECT_EQ(error_of("x ::= \"a\""), "1:1: the grammar has no rule 'root'");
  EXPECT_EQ(error_of("root ::= \"a\"\n\nroot ::= \"b\""), "3:1: rule 'root' is defined twice (first at 1:1)");
  EXPECT_EQ(error_of("root = \"a\""), "1:6: expected '::=' after the rule name 'root'");
  EXPECT_EQ(error_of("root ::= \"abc"), "1:10: unterminated literal");
  EXPECT_EQ(error_of("root ::= [abc"), "1:10: unterminated character class");
  EXPECT_EQ(error_of("root ::= [z-a]"), "1:11: character range ends before it starts");
  EXPECT_EQ(error_of("root ::= \"\\q\""), "1:11: unknown escape '\\q'");
  EXPECT_EQ(error_of("root ::= \"\\x4\""), "1:11: expected 2 hex digits after '\\x'");
  EXPECT_EQ(error_of("root ::= \"\\U00110000\""), "1:11: code point above U+10FFFF");
  EXPECT_EQ(error_of("root ::= * \"a\""), "1:10: '*' without anything to repeat before it");
  EXPECT_EQ(error_of("root ::= \"a\"{3,2}"), "1:13: repetition {m,n} with n < m");
  EXPECT_EQ(error_of("root ::= \"a\"{1"), "1:15: expected '}'");
  EXPECT_EQ(error_of("root ::= \"a\" )"), "1:14: expected a newline or the end, found ')'");
  EXPECT_EQ(error_of("::= \"a\""), "1:1: expected a rule name");
  EXPECT_EQ(error_of("root ::= \"a\"{99999}"), "1:14: repetition count above 10000");
  EXPECT_EQ(error_of("root ::= \"\xff\""), "1:11: invalid UTF-8 in the grammar");
}

TEST(Gbnf, GrammarsThatMatchNothingAreRefused) {
  EXPECT_EQ(error_of("root ::= \"a\" root"), "1:1: the grammar matches nothing: rule 'root' has no finite derivation");
  EXPECT_EQ(error_of("root ::= x\nx ::= \"(\" x \")\""),
            "1:1: the grammar matches nothing: rule 'root' has no finite derivation");
  EXPECT_EQ(error_of("root ::= [^\\x00-\\U0010FFFF]"),
            "1:1: the grammar matches nothing: rule 'root' has no finite derivation");
  // A dead alternative is dropped; the rest still works.
  auto g = Grammar::parse("root ::= \"a\" dead | \"b\"\ndead ::= \"x\" dead");
  EXPECT_FALSE(prefix(g, "a"));
  EXPECT_TRUE(matches(g, "b"));
}

TEST(Gbnf, LeftRecursionIsRefused) {
  EXPECT_EQ(error_of("root ::= root \"a\" | \"b\""),
            "1:1: rule 'root' is left-recursive (it can reach itself before matching a character)");
  EXPECT_EQ(error_of("root ::= x\nx ::= y \"a\" | \"b\"\ny ::= \"\" | x"),
            "2:1: rule 'x' is left-recursive (it can reach itself before matching a character)");
  EXPECT_EQ(error_of("root ::= (\"a\"?)*"),
            "1:16: rule 'root' is left-recursive (it can reach itself before matching a character)");
}

TEST(Gbnf, LimitsAreCleanErrors) {
  const std::string deep = "root ::= " + std::string(10000, '(') + "\"a\"" + std::string(10000, ')');
  EXPECT_EQ(error_of(deep), "1:138: groups nested deeper than 128");
  const std::string huge = "root ::= \"" + std::string(kMaxGrammarBytes, 'a') + "\"";
  EXPECT_EQ(error_of(huge), "1:1: the grammar has " + std::to_string(huge.size()) + " bytes; the limit is 1048576");
  std::string many;
  for (int i = 0; i < 300; ++i) {
    many += 'r';
    many += std::to_string(i);
    many += " ::= \"a\"{0,10000}\n";
  }
  EXPECT_NE(error_of("root ::= \"a\"\n" + many).find("the grammar needs more than 65536 rules"), std::string::npos);
}

TEST(Gbnf, JsonObjectGrammar) {
  auto g = json_object_grammar();
  EXPECT_TRUE(matches(g, R"({"a": [1, -2.5e3, true, null, "x\n\u00e9"], "b": {}})"));
  EXPECT_TRUE(matches(g, "{}"));
  EXPECT_TRUE(matches(g, "{\n  \"k\": \"v\"\n}"));
  EXPECT_FALSE(matches(g, "[]"));
  EXPECT_FALSE(matches(g, R"({"a": 01})"));
  EXPECT_TRUE(prefix(g, R"({"a": tru)"));
  EXPECT_FALSE(prefix(g, "{   "));  // whitespace is bounded
  EXPECT_FALSE(prefix(g, "{\"a\":1,}"));
}

}  // namespace
}  // namespace lumen::grammar
