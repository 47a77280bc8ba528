// RuleSet -> Grammar: which rules derive a finite text (worklist over
// alternatives, linear), which derive the empty text, left recursion (a cycle
// through leading nullable references), then the flat element layout.
#include <deque>

#include "rule_set.h"

namespace lumen::grammar::detail {

namespace {

using Element = Grammar::Element;

[[noreturn]] void fail(const RuleSet::Rule& rule, const std::string& what) {
  throw GrammarError(std::to_string(rule.line) + ":" + std::to_string(rule.col) + ": " + what);
}

// For each rule, whether one of its alternatives derives: element_ok accepts
// each of its byte sets and every rule it references derives. Linear in the
// grammar's size.
std::vector<bool> fixpoint(const RuleSet& rs, bool (*element_ok)(const RuleSet&, const Element&)) {
  const size_t n = rs.rules.size();
  std::vector<bool> result(n, false);
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> uses(n);  // rule -> (rule, alternative) per occurrence
  std::vector<std::vector<int64_t>> missing(n);
  std::deque<uint32_t> ready;
  for (uint32_t r = 0; r < n; ++r) {
    const auto& alts = rs.rules[r].alternatives;
    missing[r].assign(alts.size(), 0);
    for (uint32_t a = 0; a < alts.size(); ++a) {
      bool never = false;
      for (const Element& e : alts[a])
        if (e.kind != Element::Kind::Rule && !element_ok(rs, e)) never = true;
      if (never) {
        missing[r][a] = -1;
        continue;
      }
      for (const Element& e : alts[a])
        if (e.kind == Element::Kind::Rule) {
          ++missing[r][a];
          uses[e.value].emplace_back(r, a);
        }
      if (missing[r][a] == 0 && !result[r]) {
        result[r] = true;
        ready.push_back(r);
      }
    }
  }
  while (!ready.empty()) {
    const uint32_t s = ready.front();
    ready.pop_front();
    for (auto [r, a] : uses[s])
      if (missing[r][a] > 0 && --missing[r][a] == 0 && !result[r]) {
        result[r] = true;
        ready.push_back(r);
      }
  }
  return result;
}

}  // namespace

std::shared_ptr<const Grammar> compile(RuleSet rs) {
  const size_t n = rs.rules.size();
  const std::vector<bool> productive = fixpoint(rs, [](const RuleSet& g, const Element& e) {
    return g.byte_sets[e.value].any();
  });
  if (!productive[rs.root])
    fail(rs.rules[rs.root], "the grammar matches nothing: rule '" + rs.rules[rs.root].name +
                                "' has no finite derivation");
  // Keep only the alternatives that derive something: every stack the matcher
  // builds can then be completed.
  for (auto& rule : rs.rules)
    std::erase_if(rule.alternatives, [&](const std::vector<Element>& alt) {
      for (const Element& e : alt)
        if (e.kind == Element::Kind::Rule ? !productive[e.value] : !rs.byte_sets[e.value].any()) return true;
      return false;
    });
  const std::vector<bool> nullable = fixpoint(rs, [](const RuleSet&, const Element&) { return false; });

  // Left recursion: a cycle in "r may start with s" (iterative DFS, three colours).
  std::vector<std::vector<uint32_t>> starts(n);
  for (uint32_t r = 0; r < n; ++r)
    for (const auto& alt : rs.rules[r].alternatives)
      for (const Element& e : alt) {
        if (e.kind != Element::Kind::Rule) break;
        starts[r].push_back(e.value);
        if (!nullable[e.value]) break;
      }
  std::vector<uint8_t> colour(n, 0);  // 0 new, 1 on the path, 2 done
  for (uint32_t top = 0; top < n; ++top) {
    if (colour[top] != 0) continue;
    std::vector<std::pair<uint32_t, size_t>> path{{top, 0}};
    colour[top] = 1;
    while (!path.empty()) {
      auto& [r, next] = path.back();
      if (next == starts[r].size()) {
        colour[r] = 2;
        path.pop_back();
        continue;
      }
      const uint32_t s = starts[r][next++];
      if (colour[s] == 1)
        fail(rs.rules[s], "rule '" + rs.rules[s].name + "' is left-recursive (it can reach itself before matching a character)");
      if (colour[s] == 0) {
        colour[s] = 1;
        path.emplace_back(s, 0);
      }
    }
  }

  std::vector<Element> elements;
  std::vector<std::vector<uint32_t>> rules(n);
  for (uint32_t r = 0; r < n; ++r)
    for (const auto& alt : rs.rules[r].alternatives) {
      rules[r].push_back(static_cast<uint32_t>(elements.size()));
      elements.insert(elements.end(), alt.begin(), alt.end());
      elements.push_back({Element::Kind::End, 0});
    }
  return std::make_shared<const Grammar>(std::move(elements), std::move(rules), std::move(rs.byte_sets), rs.root);
}

}  // namespace lumen::grammar::detail
