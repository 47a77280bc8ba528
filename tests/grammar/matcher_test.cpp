// The matcher against a brute-force reference: random finite grammars over a
// small alphabet (with a two-byte character, so code points split across
// calls), their whole language enumerated, and for every byte string up to
// length 5: accept_bytes == "a prefix of some member", accepting == "a
// member", can_continue == "a prefix of a longer member". Grammars with *
// are checked for membership against the language up to that length.
#include <gtest/gtest.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "lumen/grammar/grammar.h"

namespace lumen::grammar {
namespace {

using Language = std::set<std::string>;
constexpr size_t kTooBig = 4000;

std::shared_ptr<const TokenTrie> small_vocab() {
  static const std::shared_ptr<const TokenTrie> t = [] {
    Vocabulary v;
    v.tokens = {"a", "b"};
    return TokenTrie::build(Tokenizer::from_vocabulary(v));
  }();
  return t;
}

// Appends instead of operator+ chains (GCC 12 warns wrongly about those: -Wrestrict).
std::string cat(std::initializer_list<std::string_view> parts) {
  std::string out;
  for (std::string_view p : parts) out.append(p);
  return out;
}

Language concat(const Language& x, const Language& y, size_t max_length) {
  Language out;
  for (const auto& a : x)
    for (const auto& b : y)
      if (a.size() + b.size() <= max_length) out.insert(cat({a, b}));
  return out;
}

// A random expression over rules > `rule` (so the grammar is finite unless
// stars are allowed), as GBNF text and as the language it derives (strings
// up to max_length).
class RandomGrammar {
 public:
  RandomGrammar(uint32_t seed, bool stars, size_t max_length) : rng_(seed), stars_(stars), max_length_(max_length) {
    const int rules = 1 + static_cast<int>(rng_() % 3);
    languages_.resize(static_cast<size_t>(rules));
    texts_.resize(static_cast<size_t>(rules));
    for (int r = rules - 1; r >= 0; --r) {
      current_ = r;
      rule_count_ = rules;
      texts_[static_cast<size_t>(r)] = expression(3, languages_[static_cast<size_t>(r)]);
    }
    for (int r = 0; r < rules; ++r)
      gbnf_ += cat({r == 0 ? "root" : cat({"r", std::to_string(r)}), " ::= ", texts_[static_cast<size_t>(r)], "\n"});
  }
  const std::string& gbnf() const { return gbnf_; }
  const Language& language() const { return languages_[0]; }

 private:
  std::string expression(int depth, Language& lang) {
    const int kind = static_cast<int>(rng_() % (depth > 0 ? 8 : 3));
    switch (kind) {
      case 0: {  // literal
        static const char* kLiterals[] = {"a", "b", "ab", "\xc3\xa9", "ba\xc3\xa9", ""};
        const std::string lit = kLiterals[rng_() % 6];
        lang = {lit};
        return cat({"\"", lit, "\""});
      }
      case 1: {  // class
        static const char* kClasses[] = {"[ab]", "[a]", "[a\xc3\xa9]", "[b-b\xc3\xa9]"};
        static const std::vector<std::string> kMembers[] = {{"a", "b"}, {"a"}, {"a", "\xc3\xa9"}, {"b", "\xc3\xa9"}};
        const size_t k = rng_() % 4;
        lang = Language(kMembers[k].begin(), kMembers[k].end());
        return kClasses[k];
      }
      case 2: {  // rule reference (a later rule: no recursion)
        if (current_ + 1 >= rule_count_) {
          lang = {"b"};
          return "\"b\"";
        }
        const int r = current_ + 1 + static_cast<int>(rng_() % static_cast<uint32_t>(rule_count_ - current_ - 1));
        lang = languages_[static_cast<size_t>(r)];
        return cat({"r", std::to_string(r)});
      }
      case 3: case 4: {  // sequence
        Language a, b;
        const std::string x = expression(depth - 1, a), y = expression(depth - 1, b);
        lang = concat(a, b, max_length_);
        return cat({x, " ", y});
      }
      case 5: {  // alternatives in a group
        Language a, b;
        const std::string x = expression(depth - 1, a), y = expression(depth - 1, b);
        lang = a;
        lang.insert(b.begin(), b.end());
        return cat({"(", x, " | ", y, ")"});
      }
      case 6: {  // ? or {m,n}
        Language a;
        const std::string x = expression(depth - 1, a);
        if (rng_() % 2 == 0) {
          lang = a;
          lang.insert("");
          return cat({"(", x, ")?"});
        }
        const int m = static_cast<int>(rng_() % 2), n = m + static_cast<int>(rng_() % 2);
        Language power = {""};
        for (int i = 0; i < m; ++i) power = concat(power, a, max_length_);
        lang = power;
        for (int i = m; i < n; ++i) {
          power = concat(power, a, max_length_);
          lang.insert(power.begin(), power.end());
        }
        return cat({"(", x, "){", std::to_string(m), ",", std::to_string(n), "}"});
      }
      default: {  // * or +, of something that cannot be empty (else it is left-recursive)
        Language a;
        const std::string x = expression(depth - 1, a);
        if (!stars_ || a.empty() || a.count("") != 0) {
          lang = a;
          return cat({"(", x, ")"});
        }
        const bool plus = rng_() % 2 == 0;
        Language power = {""};
        lang = plus ? Language{} : Language{""};
        for (size_t i = 0; i < max_length_; ++i) {
          power = concat(power, a, max_length_);
          lang.insert(power.begin(), power.end());
        }
        return cat({"(", x, ")", plus ? "+" : "*"});
      }
    }
  }

  std::mt19937 rng_;
  bool stars_;
  size_t max_length_;
  int current_ = 0, rule_count_ = 1;
  std::vector<Language> languages_;
  std::vector<std::string> texts_;
  std::string gbnf_;
};

std::vector<std::string> all_strings(size_t max_length) {
  static const std::string kBytes = "ab\xc3\xa9";
  std::vector<std::string> out{""};
  for (size_t i = 0; i < out.size(); ++i)
    if (out[i].size() < max_length)
      for (char c : kBytes) out.push_back(cat({out[i], std::string_view(&c, 1)}));
  return out;
}

TEST(Matcher, FiniteGrammarsAgreeWithTheirEnumeratedLanguage) {
  const std::vector<std::string> strings = all_strings(5);
  int checked = 0;
  for (uint32_t seed = 1; checked < 150; ++seed) {
    RandomGrammar g(seed, /*stars=*/false, /*max_length=*/1000);
    const Language& lang = g.language();
    if (lang.size() > kTooBig) continue;  // another seed: the enumeration stays small
    std::shared_ptr<const Grammar> grammar;
    try {
      grammar = Grammar::parse(g.gbnf());
    } catch (const GrammarError& e) {
      // Only a grammar whose language is empty may be refused.
      ASSERT_TRUE(lang.empty()) << g.gbnf() << e.what();
      continue;
    }
    ASSERT_FALSE(lang.empty()) << g.gbnf();
    ++checked;
    for (const std::string& s : strings) {
      bool prefix = false, longer = false;
      for (auto it = lang.lower_bound(s); it != lang.end() && it->starts_with(s); ++it) {
        prefix = true;
        longer = longer || it->size() > s.size();
      }
      Matcher m(grammar, small_vocab());
      ASSERT_EQ(m.accept_bytes(s), prefix) << g.gbnf() << "text: " << s;
      if (!prefix) continue;
      EXPECT_EQ(m.accepting(), lang.count(s) == 1) << g.gbnf() << "text: " << s;
      EXPECT_EQ(m.can_continue(), longer) << g.gbnf() << "text: " << s;
    }
  }
}

TEST(Matcher, GrammarsWithStarsAgreeOnMembership) {
  const std::vector<std::string> strings = all_strings(5);
  for (uint32_t seed = 1; seed <= 100; ++seed) {
    RandomGrammar g(seed, /*stars=*/true, /*max_length=*/5);
    const Language& lang = g.language();
    std::shared_ptr<const Grammar> grammar;
    try {
      grammar = Grammar::parse(g.gbnf());
    } catch (const GrammarError& e) {
      ASSERT_TRUE(lang.empty()) << g.gbnf() << e.what();
      continue;
    }
    for (const std::string& s : strings) {
      Matcher m(grammar, small_vocab());
      const bool member = lang.count(s) == 1;
      const bool prefix = m.accept_bytes(s);
      EXPECT_EQ(prefix && m.accepting(), member) << g.gbnf() << "text: " << s;
      // A member within the length is a prefix of itself.
      if (member) {
        EXPECT_TRUE(prefix) << g.gbnf() << "text: " << s;
      }
    }
  }
}

TEST(Matcher, RefusedBytesLeaveTheStateUnchanged) {
  auto g = Grammar::parse("root ::= \"ab\" \"c\"*");
  Matcher m(g, small_vocab());
  EXPECT_TRUE(m.accept_bytes("a"));
  EXPECT_FALSE(m.accept_bytes("bx"));  // b is fine, x is not: nothing is consumed
  EXPECT_FALSE(m.accepting());
  EXPECT_TRUE(m.accept_bytes("bcc"));
  EXPECT_TRUE(m.accepting());
  EXPECT_TRUE(m.can_continue());
}

TEST(Matcher, StateCachesStayBounded) {
  // Every position of a long bounded repetition is a new state; the caches
  // are dropped and rebuilt from the current state past their bound.
  auto g = Grammar::parse("root ::= [ab]{0,10000} \"!\"");
  Matcher m(g, small_vocab());
  for (int i = 0; i < 10000; ++i) ASSERT_TRUE(m.accept_bytes(i % 3 ? "a" : "b"));
  EXPECT_LT(m.states(), size_t{20000});
  EXPECT_FALSE(m.accept_bytes("a"));
  EXPECT_TRUE(m.accept_bytes("!"));
  EXPECT_TRUE(m.accepting());
  EXPECT_FALSE(m.can_continue());
}

}  // namespace
}  // namespace lumen::grammar
