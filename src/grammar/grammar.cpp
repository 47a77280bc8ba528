// The compiled grammar's storage and the built-in JSON grammar.
#include "lumen/grammar/grammar.h"

namespace lumen::grammar {

Grammar::Grammar(std::vector<Element> elements, std::vector<std::vector<uint32_t>> rules,
                 std::vector<std::bitset<256>> byte_sets, uint32_t root)
    : elements_(std::move(elements)), rules_(std::move(rules)), byte_sets_(std::move(byte_sets)), root_(root) {}

std::string_view json_object_gbnf() {
  // llama.cpp's grammars/json.gbnf, rooted at an object.
  return R"(root   ::= object
value  ::= object | array | string | number | ("true" | "false" | "null") ws
object ::= "{" ws ( string ":" ws value ("," ws string ":" ws value)* )? "}" ws
array  ::= "[" ws ( value ("," ws value)* )? "]" ws
string ::= "\"" ( [^"\\\x7F\x00-\x1F] | "\\" (["\\/bfnrt] | "u" [0-9a-fA-F]{4}) )* "\"" ws
number ::= ("-"? ([0-9] | [1-9] [0-9]{0,15})) ("." [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws
# At most one space, or a newline and 20 spaces or tabs, between tokens.
ws     ::= | " " | "\n" [ \t]{0,20}
)";
}

std::shared_ptr<const Grammar> json_object_grammar() {
  static const std::shared_ptr<const Grammar> grammar = Grammar::parse(json_object_gbnf());
  return grammar;
}

}  // namespace lumen::grammar
