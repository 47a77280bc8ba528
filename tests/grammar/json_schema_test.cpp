// json_schema_to_gbnf: every keyword of the subset (texts its grammar must
// and must not match), every error (the keyword and the pointer it names),
// the limits (a 10,000-deep and a 5 MB schema end in a SchemaError or a
// small grammar), and random walks through each grammar whose every complete
// text parses and validates (tests/support/json_schema_check.h).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "lumen/grammar/grammar.h"
#include "lumen/grammar/json_schema.h"
#include "support/json_schema_check.h"

namespace lumen::grammar {
namespace {

using json = nlohmann::ordered_json;

std::shared_ptr<const TokenTrie> no_vocab() {  // accept_bytes needs none
  static const std::shared_ptr<const TokenTrie> t = [] {
    Vocabulary v;
    v.tokens = {"a"};
    return TokenTrie::build(Tokenizer::from_vocabulary(v));
  }();
  return t;
}

std::shared_ptr<const Grammar> grammar_of(const json& schema) {
  return Grammar::parse(json_schema_to_gbnf(schema));
}

bool matches(const std::shared_ptr<const Grammar>& g, std::string_view text) {
  Matcher m(g, no_vocab());
  return m.accept_bytes(text) && m.accepting();
}

struct Case {
  const char* schema;
  std::vector<std::string> good, bad;
};

// Every keyword; `good` texts must also validate, `bad` ones need not fail
// validation (the grammar may be stricter than the schema: order, whitespace).
const std::vector<Case> kCases = {
    {R"({})", {R"({"a":[1,{"b":null}],"c":"\u00e9"})", R"("x")", "-1.5e3", "true"}, {"tru", "{,}"}},
    {R"(true)", {"null", "[]"}, {"nul"}},
    {R"({"type":"string"})", {R"("")", R"("a\"b\\\n\u0041\uD7FF\uE000")", "\"\xC3\xA9\""},
     {"\"\n\"", "\"a", "1", R"("\ud800")", R"("\uDFFF")"}},
    {R"({"type":"integer"})", {"0", "-7", "1234567890123456"}, {"01", "1.5", "-", "+1", "12345678901234567"}},
    {R"({"type":"number"})", {"0", "-0.25", "1e5", "2.5E-3"}, {".5", "1.", "1e", "00"}},
    {R"({"type":"boolean"})", {"true", "false"}, {"0", "True"}},
    {R"({"type":"null"})", {"null"}, {"nil", "0"}},
    {R"({"type":["string","null"]})", {"null", R"("x")"}, {"1"}},
    {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"string"}},"required":["b"]})",
     {R"({"b":"x"})", R"({"a":1,"b":"x"})", R"({ "a": 1, "b": "x" })", "{\n  \"b\": \"x\"\n}"},
     {R"({"a":1})", R"({"b":"x","a":1})", R"({"b":"x","c":1})", "{}"}},
    {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":false})",
     {"{}", R"({"a":1})"}, {R"({"b":1})"}},
    {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"boolean"}})",
     {"{}", R"({"a":1,"b":true})", R"({"b":true,"ab":false})", R"({"":true})"},
     {R"({"a":true})", R"({"b":1})", R"({"b":true,"a":1})"}},
    {R"({"type":"object","additionalProperties":true,"required":["id"]})", {R"({"id":[1],"x":null})"}, {"{}"}},
    {R"({"type":"object"})", {"{}", R"({"a":1,"b":{"c":[]}})"}, {"[]", R"({"a"})"}},
    {R"({"type":"object","required":["id"]})", {R"({"id":"x","more":1})"}, {"{}", R"({"more":1})"}},
    {R"({"properties":{"a":{"const":1}}})", {"{}", R"({"a":1})"}, {R"({"a":2})"}},
    {R"({"enum":["red","green",1,null]})", {R"("red")", "1", "null"}, {R"("blue")", "2"}},
    {R"({"type":"string","enum":["red",1]})", {R"("red")"}, {"1"}},
    {R"({"const":{"k":[1,2]}})", {R"({"k":[1,2]})"}, {R"({"k":[2,1]})"}},
    {R"({"type":"array","items":{"type":"boolean"},"minItems":2,"maxItems":3})",
     {"[true,false]", "[ true, false, true ]"}, {"[true]", "[true,false,true,true]", "[1,2]"}},
    {R"({"type":"array","maxItems":0})", {"[]"}, {"[1]"}},
    {R"({"type":"array"})", {"[]", R"([1,"a",{}])"}, {"[1,]"}},
    {R"({"type":"array","prefixItems":[{"type":"integer"},{"type":"string"}],"minItems":1})",
     {"[1]", R"([1,"a"])"}, {"[]", R"([1,"a",2])", R"(["a"])"}},
    {R"({"type":"array","prefixItems":[{"type":"integer"}],"items":{"type":"string"}})",
     {"[]", "[1]", R"([1,"a","b"])"}, {R"([1,2])"}},
    {R"({"type":"array","items":[{"type":"null"}]})", {"[]", "[null]"}, {"[null,null]"}},
    {R"({"type":"array","items":false,"prefixItems":[{"type":"null"}]})", {"[null]"}, {"[null,null]"}},
    {R"({"$defs":{"node":{"type":"object","properties":{"v":{"type":"integer"},"next":{"anyOf":[{"$ref":"#/$defs/node"},{"type":"null"}]}},"required":["v","next"]}},"$ref":"#/$defs/node"})",
     {R"({"v":1,"next":{"v":2,"next":null}})"}, {R"({"v":1})", R"({"v":1,"next":{"v":2}})"}},
    {R"({"definitions":{"n":{"type":"integer"}},"type":"array","items":{"$ref":"#/definitions/n","description":"d"}})",
     {"[1,2]"}, {R"(["a"])"}},
    {R"({"type":"object","properties":{"x":{"$ref":"#"}}})", {"{}", R"({"x":{"x":{}}})"}, {R"({"x":1})"}},
    {R"({"anyOf":[{"type":"integer"},{"type":"string","maxLength":1}]})", {"1", R"("a")"}, {R"("ab")", "1.5"}},
    {R"({"oneOf":[{"type":"boolean"},{"type":"null"}]})", {"true", "null"}, {"0"}},
    {R"({"type":"object","properties":{"kind":{"type":"string"}},"required":["kind"],"anyOf":[{"properties":{"kind":{"const":"a"}}},{"properties":{"kind":{"const":"b"}}}]})",
     {R"({"kind":"a"})", R"({"kind":"b"})"}, {R"({"kind":"c"})", "{}"}},
    {R"({"allOf":[{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]},{"properties":{"b":{"type":"string"}}}]})",
     {R"({"a":1})", R"({"a":1,"b":"x"})"}, {R"({"b":"x"})"}},
    {R"({"allOf":[{"type":"integer","minimum":0},{"maximum":5},{"exclusiveMaximum":5}]})", {"0", "4"}, {"5", "-1"}},
    {R"({"allOf":[{"properties":{"a":{"type":"integer"}},"additionalProperties":false},{"properties":{"b":{"type":"string"}}}]})",
     {"{}", R"({"a":1})"}, {R"({"b":"x"})"}},
    {R"({"allOf":[{"enum":[1,2,3]},{"enum":[2,3,4]}]})", {"2", "3"}, {"1", "4"}},
    {R"({"type":"string","minLength":2,"maxLength":3})", {R"("ab")", R"("abc")", R"("\u00e9\n")", "\"\xC3\xA9\xC3\xA9\""},
     {R"("a")", R"("abcd")"}},
    {R"({"type":"string","minLength":1})", {R"("a")", R"("abcdefghij")"}, {R"("")"}},
    {R"({"type":"string","maxLength":100000})", {R"("")", R"("abc")"}, {"\"" + std::string(1001, 'a') + "\""}},
    {R"({"type":"string","format":"date"})", {R"("2024-02-29")"}, {R"("2024-2-29")", R"("2024-13-01")"}},
    {R"({"type":"string","format":"time"})", {R"("23:59:59Z")", R"("01:02:03.5+05:30")"}, {R"("24:00:00Z")", R"("12:00:00")"}},
    {R"({"type":"string","format":"date-time"})", {R"("2024-01-31T12:00:00Z")"}, {R"("2024-01-31 12:00:00Z")"}},
    {R"({"type":"string","format":"uuid"})", {R"("123e4567-e89b-12d3-a456-426614174000")"}, {R"("123e4567")"}},
    {R"({"type":"string","pattern":"^[a-z]+(-[0-9]{2,4})?\\.x$"})", {R"("abc-123.x")", R"("a.x")"},
     {R"("a-1.x")", R"("A.x")", R"("a.xx")"}},
    {R"({"type":"string","pattern":"^(?:ab|c)*d?$"})", {R"("")", R"("abcab")", R"("cd")"}, {R"("ac")"}},
    {R"({"type":"string","pattern":"^\\d{3}\"\\s[^a]\\w.$"})", {R"("123\" b_z")", R"("123\"\tb0A")"},
     {R"("123\" a_z")", R"("12\" b_z")"}},
    {R"({"type":"string","pattern":"^[\\]\\-a-c\\\\]\\D\\W\\S$"})", {R"("]x!a")", R"("\\x!a")", R"("-x!a")"},
     {R"("dx!a")", R"("]1!a")", R"("]xaa")", R"("]x! ")"}},
    {R"({"type":"string","pattern":"^a{2}b{1,}c{0,1}$"})", {R"("aab")", R"("aabbbc")"}, {R"("ab")", R"("aacc")"}},
    {R"({"type":"integer","minimum":0,"maximum":150})", {"0", "7", "99", "150"}, {"151", "-1", "1000"}},
    {R"({"type":"integer","minimum":-120,"maximum":-7})", {"-120", "-7", "-99", "-10"}, {"-6", "-121", "0", "7"}},
    {R"({"type":"integer","exclusiveMinimum":99})", {"100", "123456"}, {"99", "0", "-100"}},
    {R"({"type":"integer","exclusiveMaximum":-3})", {"-4", "-1000000"}, {"-3", "0", "3"}},
    {R"({"type":"integer","minimum":-3,"maximum":12})", {"-3", "0", "9", "12"}, {"-4", "13", "-0"}},
    {R"({"type":"integer","minimum":1.5,"maximum":3.5})", {"2", "3"}, {"1", "4"}},
    {R"({"type":"integer","minimum":5,"maximum":5})", {"5"}, {"4", "6"}},
    {R"({"type":"number","minimum":-5,"exclusiveMaximum":10})", {"-5", "-5.000", "9.999", "0", "-0.5", "3.25"},
     {"-5.001", "10", "10.0", "1e1"}},
    {R"({"type":"number","exclusiveMinimum":0,"maximum":1})", {"0.001", "1", "1.00", "0.5"}, {"0", "0.000", "1.5", "-0.1"}},
    {R"({"type":"number","minimum":0})", {"0", "12345.5"}, {"-0.5", "-1"}},
    {R"({"type":"number","maximum":-2})", {"-2", "-2.0", "-100.25"}, {"-1.5", "0"}},
    {R"({"minimum":1})", {"1", "2.5"}, {"0.5"}},
    {R"({"type":"object","description":"d","title":"t","default":{},"examples":[{}],"$schema":"x","$id":"y","$comment":"z"})",
     {"{}"}, {"[]"}},
};

TEST(JsonSchema, EveryKeywordMatchesWhatItShould) {
  for (const Case& c : kCases) {
    const json schema = json::parse(c.schema);
    std::shared_ptr<const Grammar> g;
    ASSERT_NO_THROW(g = grammar_of(schema)) << c.schema << "\n" << json_schema_to_gbnf(schema);
    for (const std::string& text : c.good) {
      EXPECT_TRUE(matches(g, text)) << c.schema << " should match " << text << "\n" << json_schema_to_gbnf(schema);
      EXPECT_EQ(testing::json_schema_violation(json::parse(text), schema), "") << c.schema << " " << text;
    }
    for (const std::string& text : c.bad)
      EXPECT_FALSE(matches(g, text)) << c.schema << " should not match " << text << "\n" << json_schema_to_gbnf(schema);
  }
}

// A random walk through the grammar, byte by byte (structural bytes first
// half of the time, so strings close), until it may end and chooses to.
std::string random_text(const std::shared_ptr<const Grammar>& g, std::mt19937& rng, bool& complete) {
  Matcher m(g, no_vocab());
  std::string text;
  const std::string structural = "\"}],:0123456789-.etfnrul ";
  for (int step = 0; step < 400; ++step) {
    if (m.accepting() && (!m.can_continue() || rng() % 4 == 0)) {
      complete = true;
      return text;
    }
    std::vector<int> order(256);
    for (int i = 0; i < 256; ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    if (rng() % 2 == 0)
      for (size_t i = 0; i < structural.size(); ++i)
        order.insert(order.begin(), static_cast<unsigned char>(structural[rng() % structural.size()]));
    bool moved = false;
    for (int b : order) {
      const char c = static_cast<char>(b);
      if (m.accept_bytes(std::string_view(&c, 1))) {
        text += c;
        moved = true;
        break;
      }
    }
    if (!moved) break;
  }
  complete = m.accepting();
  return text;
}

TEST(JsonSchema, RandomTextsOfEveryGrammarParseAndValidate) {
  std::mt19937 rng(7);
  int complete_texts = 0;
  for (const Case& c : kCases) {
    const json schema = json::parse(c.schema);
    const auto g = grammar_of(schema);
    for (int walk = 0; walk < 12; ++walk) {
      bool complete = false;
      const std::string text = random_text(g, rng, complete);
      if (!complete) continue;
      ++complete_texts;
      const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
      ASSERT_FALSE(value.is_discarded()) << c.schema << " produced invalid JSON: " << text;
      EXPECT_EQ(testing::json_schema_violation(value, schema), "") << c.schema << " produced " << text;
    }
  }
  EXPECT_GT(complete_texts, static_cast<int>(kCases.size()) * 6);
}

std::string error_of(const std::string& schema) {
  try {
    json_schema_to_gbnf(json::parse(schema));
  } catch (const SchemaError& e) {
    return e.what();
  }
  return "no error";
}

TEST(JsonSchema, EveryErrorNamesTheKeywordAndWhere) {
  const std::vector<std::pair<const char*, const char*>> cases = {
      {R"({"properties":{"a":{"patternProperties":{}}}})", "unsupported keyword 'patternProperties' at /properties/a"},
      {R"({"type":"array","uniqueItems":true})", "unsupported keyword 'uniqueItems' at /"},
      {R"({"type":"object","minProperties":1})", "unsupported keyword 'minProperties' at /"},
      {R"({"not":{}})", "unsupported keyword 'not' at /"},
      {R"(false)", "schema 'false' matches nothing at /"},
      {R"({"items":7})", "a schema must be an object or a boolean at /items"},
      {R"({"type":"text"})", "unknown type 'text' at /type"},
      {R"({"type":[]})", "'type' must be a string or an array of strings at /type"},
      {R"({"$ref":"other.json#/a"})", "only local '$ref' ('#/...') is supported, not 'other.json#/a' at /$ref"},
      {R"({"$ref":"#/$defs/missing"})", "'$ref' '#/$defs/missing' names nothing at /$ref"},
      {R"({"$ref":"#/$defs/a","type":"string","$defs":{"a":{}}})", "keyword 'type' beside '$ref' at /"},
      {R"({"anyOf":[]})", "'anyOf' must be a non-empty array at /anyOf"},
      {R"({"oneOf":{}})", "'oneOf' must be a non-empty array at /oneOf"},
      {R"({"allOf":[{"type":"string"},{"type":"integer"}]})", "'allOf' branches allow no common 'type' at /allOf/1"},
      {R"({"allOf":[{"pattern":"^a$"},{"pattern":"^b$"}]})", "'allOf' cannot merge two different 'pattern' at /allOf/1"},
      {R"({"allOf":[{"enum":[1]},{"enum":[2]}]})", "'allOf' branches allow no common 'enum' value at /allOf/1"},
      {R"({"allOf":[{"properties":{"a":{}},"additionalProperties":false},{"required":["b"],"properties":{"b":{}}}]})",
       "'allOf' requires 'b' that a branch forbids at /allOf/1"},
      {R"({"enum":[]})", "'enum' must be a non-empty array at /enum"},
      {R"({"enum":[1],"minimum":0})", "keyword 'minimum' beside 'enum' at /"},
      {R"({"type":"string","enum":[1,2]})", "no value of 'enum'/'const' has the schema's 'type' at /"},
      {R"({"type":"string","minLength":-1})", "'minLength' must be a non-negative integer at /minLength"},
      {R"({"type":"string","minLength":2000})", "'minLength' above 1000 at /minLength"},
      {R"({"type":"string","minLength":3,"maxLength":2})", "'maxLength' below 'minLength' at /maxLength"},
      {R"({"type":"array","minItems":3,"maxItems":1})", "'maxItems' below 'minItems' at /maxItems"},
      {R"({"type":"array","prefixItems":[{}],"items":false,"minItems":2})", "'minItems' above the items the array may hold at /"},
      {R"({"type":"string","format":"email"})", "unsupported 'format' 'email' (date, time, date-time, uuid are) at /format"},
      {R"({"type":"string","format":"date","maxLength":3})", "keyword 'format' beside 'minLength'/'maxLength'/'pattern' at /"},
      {R"({"type":"string","pattern":"^a$","maxLength":3})", "keyword 'pattern' beside 'minLength'/'maxLength' at /"},
      {R"({"type":"string","pattern":"abc"})", "'pattern' must start with '^' and end with '$' at /pattern"},
      {R"({"type":"string","pattern":"^a\\bc$"})", "'pattern' uses an unsupported escape '\\b' (at character 4) at /pattern"},
      {R"({"type":"string","pattern":"^(?=a)$"})", "'pattern' uses an unsupported group '(?' (at character 2) at /pattern"},
      {R"({"type":"string","pattern":"^(a$"})", "'pattern' has an unclosed '(' (at character 3) at /pattern"},
      {R"({"type":"string","pattern":"^a)$"})", "'pattern' unbalanced ')' (at character 2) at /pattern"},
      {R"({"type":"string","pattern":"^[a$"})", "'pattern' has an unclosed '[' (at character 3) at /pattern"},
      {R"({"type":"string","pattern":"^*$"})", "'pattern' has nothing to repeat (at character 2) at /pattern"},
      {R"({"type":"string","pattern":"^a**$"})", "'pattern' repeats a repetition (at character 3) at /pattern"},
      {R"({"type":"string","pattern":"^a{2,1}$"})", "'pattern' has '{m,n}' with n < m (at character 7) at /pattern"},
      {R"({"type":"string","pattern":"^a{x}$"})", "'pattern' has a malformed '{m,n}' (at character 3) at /pattern"},
      {R"({"type":"string","pattern":"^a{5000}$"})", "'pattern' repeats more than 1000 times (at character 8) at /pattern"},
      {R"({"type":"string","pattern":"^[z-a]$"})", "'pattern' has a class range out of order (at character 5) at /pattern"},
      {R"({"type":"string","pattern":"^a^$"})", "'pattern' uses '^' or '$' inside (at character 3) at /pattern"},
      {R"({"type":"string","pattern":"^[\\W]$"})", "'pattern' uses \\D, \\W or \\S inside a class (at character 4) at /pattern"},
      {R"({"type":"string","pattern":7})", "'pattern' must be a string at /pattern"},
      {R"({"type":"integer","minimum":"1"})", "'minimum' must be a number at /minimum"},
      {R"({"type":"integer","minimum":1e20})", "'minimum' beyond +-1e15 at /minimum"},
      {R"({"type":"integer","minimum":5,"exclusiveMaximum":5})", "no integer within 'minimum'..'maximum' at /"},
      {R"({"type":"number","minimum":0.5})", "'minimum' of a number must be an integer within +-1e15 at /minimum"},
      {R"({"type":"number","minimum":1,"exclusiveMaximum":1})", "no number within the bounds at /"},
      {R"({"type":"object","properties":[]})", "'properties' must be an object at /properties"},
      {R"({"type":"object","required":"a"})", "'required' must be an array of strings at /required"},
      {R"({"type":"object","required":["a"],"additionalProperties":false})",
       "'required' names 'a' that 'additionalProperties: false' forbids at /required"},
      {R"({"properties":{"a/b":{"properties":{"c~d":{"type":"strin"}}}}})", "unknown type 'strin' at /properties/a~1b/properties/c~0d/type"},
  };
  for (const auto& [schema, message] : cases) EXPECT_EQ(error_of(schema), message) << schema;
}

TEST(JsonSchema, TenThousandDeepSchemaIsAnError) {
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep += R"({"type":"array","items":)";
  deep += "{}";
  for (int i = 0; i < 10000; ++i) deep += "}";
  const std::string e = error_of(deep);
  EXPECT_NE(e.find("the schema nests deeper than 64 levels at /items/items"), std::string::npos) << e.substr(0, 200);
  std::string refs = R"({"$defs":{)";  // a chain of 200 references
  for (int i = 0; i < 200; ++i) refs += "\"d" + std::to_string(i) + "\":{\"$ref\":\"#/$defs/d" + std::to_string(i + 1) + "\"},";
  refs += R"("d200":{}},"$ref":"#/$defs/d0"})";
  EXPECT_NE(error_of(refs).find("the schema nests deeper than 64 levels"), std::string::npos);
  std::string pattern = R"({"type":"string","pattern":"^)";
  for (int i = 0; i < 10000; ++i) pattern += "(";
  pattern += "a";
  for (int i = 0; i < 10000; ++i) pattern += ")";
  pattern += R"($"})";
  EXPECT_NE(error_of(pattern).find("'pattern' nests too deep"), std::string::npos);
}

TEST(JsonSchema, FiveMegabyteSchemasAreBounded) {
  // Five megabytes of enum values: more grammar than the limit allows.
  std::string text = R"({"enum":[)";
  for (int i = 0; i < 95000; ++i) text += (i ? ",\"" : "\"") + std::string(50, 'a') + std::to_string(i) + "\"";
  text += "]}";
  ASSERT_GT(text.size(), 5u << 20);
  EXPECT_NE(error_of(text).find("grammar exceeds"), std::string::npos);
  // Five megabytes that constrain nothing: a small grammar.
  const json described = {{"type", "integer"}, {"description", std::string(5u << 20, 'x')}};
  EXPECT_LT(json_schema_to_gbnf(described).size(), 200u);
  // Many properties: the limit again.
  json wide = {{"type", "object"}, {"properties", json::object()}};
  for (int i = 0; i < 5000; ++i) wide["properties"][std::string(100, 'p') + std::to_string(i)] = {{"type", "integer"}};
  EXPECT_NE(error_of(wide.dump()).find("grammar exceeds"), std::string::npos);
}

// A prefix names every rule, so the grammars of two schemas join into one.
TEST(JsonSchema, PrefixedGrammarsJoin) {
  const std::string a = json_schema_to_gbnf(json::parse(R"({"type":"object","properties":{"n":{"type":"integer"}}})"), "a-");
  const std::string b = json_schema_to_gbnf(json::parse(R"({"type":"array","items":{"type":"string"}})"), "b-");
  for (const std::string& g : {a, b})
    for (size_t line = 0; line < g.size(); line = g.find('\n', line) + 1)
      EXPECT_TRUE(g.compare(line, 2, "a-") == 0 || g.compare(line, 2, "b-") == 0) << g.substr(line, 40);
  const auto joined = Grammar::parse("root ::= a-root | b-root\n" + a + b);
  EXPECT_TRUE(matches(joined, R"({"n":1})"));
  EXPECT_TRUE(matches(joined, R"(["x"])"));
  EXPECT_FALSE(matches(joined, "[1]"));
  EXPECT_THROW(json_schema_to_gbnf(json::object(), "bad prefix!"), SchemaError);
}

}  // namespace
}  // namespace lumen::grammar
