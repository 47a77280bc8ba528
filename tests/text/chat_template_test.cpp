// Chat-template tests: the four shared reference templates and every template
// of tests/data/chat-templates rendered byte-identically to jinja2 (the
// expected files come from tools/chat/render_reference.py), jinja2 semantics
// the templates rely on, and errors with the template's line and column.
#include "lumen/text/chat_template.h"
#include "lumen/gguf/gguf.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

namespace lumen::chat {
namespace {

const std::string kSharedDir = std::string(LUMEN_SHARED_DIR) + "/reference/chat-templates";
const std::string kDataDir = std::string(LUMEN_SOURCE_DIR) + "/tests/data/chat-templates";

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

nlohmann::ordered_json read_json(const std::string& path) { return nlohmann::ordered_json::parse(read(path)); }

// 2025-02-20 12:00 local time, the reference's strftime_now clock.
int64_t reference_clock() {
  std::tm tm{};
  tm.tm_year = 125;
  tm.tm_mon = 1;
  tm.tm_mday = 20;
  tm.tm_hour = 12;
  tm.tm_isdst = -1;
  return static_cast<int64_t>(std::mktime(&tm));
}

std::string render(std::string_view source, const nlohmann::ordered_json& messages, bool add_generation_prompt = true,
                   nlohmann::ordered_json extra = nlohmann::ordered_json::object()) {
  RenderOptions o;
  o.add_generation_prompt = add_generation_prompt;
  o.bos_token = "<s>";
  o.eos_token = "</s>";
  o.extra = std::move(extra);
  o.now = reference_clock();
  return ChatTemplate(source).render(messages, o);
}

std::string render_text(std::string_view source, nlohmann::ordered_json extra = nlohmann::ordered_json::object()) {
  return render(source, nlohmann::ordered_json::array(), true, std::move(extra));
}

TEST(ChatTemplate, SharedReferenceRenderingsAreByteIdentical) {
  const auto index = read_json(kSharedDir + "/templates.json");
  const auto conversations = read_json(kSharedDir + "/conversations.json");
  int checked = 0, refused = 0;
  for (const auto& t : index["templates"]) {
    const std::string name = t["name"];
    const ChatTemplate tmpl(read(kSharedDir + "/" + t["file"].get<std::string>()));
    for (const auto& conv : conversations) {
      const std::string id = std::to_string(conv["id"].get<int>());
      RenderOptions o;
      o.add_generation_prompt = conv["add_generation_prompt"];
      o.bos_token = t["bos"];
      o.eos_token = t["eos"];
      o.now = reference_clock();
      if (t.contains("skip") && t["skip"].contains(id)) {
        EXPECT_THROW(tmpl.render(conv["messages"], o), TemplateError) << name << " conversation " << id;
        ++refused;
        continue;
      }
      EXPECT_EQ(tmpl.render(conv["messages"], o), read(kSharedDir + "/" + name + ".conv" + id + ".txt"))
          << name << " conversation " << id;
      ++checked;
    }
  }
  EXPECT_EQ(checked, 17);
  EXPECT_EQ(refused, 3);
}

// Every case of tests/data/chat-templates/manifest.json: a template, a
// conversation (messages and context variables), bos/eos, the generation
// prompt flag, and either jinja2's output or the error it raised.
TEST(ChatTemplate, CollectedTemplatesMatchJinja2) {
  const auto manifest = read_json(kDataDir + "/manifest.json");
  std::map<std::string, nlohmann::ordered_json> conversations;
  int rendered = 0, errors = 0;
  std::set<std::string> templates;
  for (const auto& c : manifest["cases"]) {
    const std::string tname = c["template"];
    const std::string cname = c["conversation"];
    templates.insert(tname);
    if (!conversations.count(cname)) conversations[cname] = read_json(kDataDir + "/conversations/" + cname + ".json");
    const auto& conv = conversations[cname];
    RenderOptions o;
    o.add_generation_prompt = c["add_generation_prompt"];
    o.bos_token = c["bos"];
    o.eos_token = c["eos"];
    o.now = reference_clock();
    for (auto it = conv.begin(); it != conv.end(); ++it)
      if (it.key() != "messages") o.extra[it.key()] = it.value();
    const std::string label = tname + " / " + cname + (o.add_generation_prompt ? "" : " (no generation prompt)");
    std::string source = read(kDataDir + "/templates/" + tname + ".jinja");
    try {
      const ChatTemplate tmpl(source);
      const std::string out = tmpl.render(conv["messages"], o);
      if (c.contains("expected")) {
        EXPECT_EQ(out, read(kDataDir + "/expected/" + c["expected"].get<std::string>())) << label;
        ++rendered;
      } else {
        ADD_FAILURE() << label << ": jinja2 raised '" << c["error"].get<std::string>() << "' but we rendered";
      }
    } catch (const TemplateError& e) {
      if (c.contains("error")) {
        // raise_exception messages must match; other errors only need to happen.
        const std::string want = c["error"];
        if (c.value("raised", false)) {
          EXPECT_EQ(e.message(), "raise_exception: " + want) << label;
        }
        ++errors;
      } else {
        ADD_FAILURE() << label << ": " << e.what();
      }
    }
  }
  EXPECT_GE(templates.size(), 40u);
  EXPECT_GT(rendered, 200);
  std::printf("chat templates: %zu templates, %d renderings identical, %d refusals\n", templates.size(), rendered,
              errors);
}

TEST(ChatTemplate, WhitespaceControlTrimBlocksAndLstripBlocks) {
  EXPECT_EQ(render_text("  {% if true %}\n  x\n  {% endif %}\ny"), "  x\ny");
  EXPECT_EQ(render_text("a  {%- if true -%}  b  {%- endif -%}  c"), "abc");
  EXPECT_EQ(render_text("a\n  {{- 'b' -}}  \nc"), "abc");
  EXPECT_EQ(render_text("a {# c #}\nb"), "a b");
  EXPECT_EQ(render_text("  {#- c #}\nb"), "b");
  EXPECT_EQ(render_text("x {% if true %}y{% endif %}\n"), "x y");  // one trailing newline dropped
  EXPECT_EQ(render_text("x\n\n"), "x\n");
  EXPECT_EQ(render_text("  {%+ if true %}a{% endif %}"), "  a");
  EXPECT_EQ(render_text("{% raw %}{{ x }}{% endraw %}"), "{{ x }}");
  EXPECT_EQ(render_text("a\r\nb"), "a\nb");
}

TEST(ChatTemplate, LoopVariablesElseFilterAndControls) {
  EXPECT_EQ(render_text("{% for x in [1,2,3] %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.first }}"
                        "{{ loop.last }}{{ loop.length }}|{% endfor %}"),
            "103TrueFalse3|212FalseFalse3|321FalseTrue3|");
  EXPECT_EQ(render_text("{% for x in [] %}a{% else %}empty{% endfor %}"), "empty");
  EXPECT_EQ(render_text("{% for x in range(10) if x % 3 == 0 %}{{ x }}/{{ loop.length }} {% endfor %}"),
            "0/4 3/4 6/4 9/4 ");
  EXPECT_EQ(render_text("{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x == 4 %}{% break %}"
                        "{% endif %}{{ x }}{% endfor %}"),
            "013");
  EXPECT_EQ(render_text("{% for x in 'ab' %}{{ loop.previtem is defined }}{{ loop.nextitem }}{% endfor %}"),
            "FalsebTrue");
  EXPECT_EQ(render_text("{% for k, v in {'a': 1, 'b': 2}.items() %}{{ k }}={{ v }};{% endfor %}"), "a=1;b=2;");
  // A set inside a loop does not outlive the iteration; a namespace does.
  EXPECT_EQ(render_text("{% set x = 0 %}{% for i in range(3) %}{% set x = x + 1 %}{{ x }}{% endfor %}{{ x }}"),
            "1110");
  EXPECT_EQ(render_text("{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}"
                        "{{ ns.n }}"),
            "3");
}

TEST(ChatTemplate, MacrosSetBlocksAndCallBlocks) {
  EXPECT_EQ(render_text("{% macro m(a, b='B') %}[{{ a }}{{ b }}]{% endmacro %}{{ m(1) }}{{ m(1, b=2) }}{{ m(b=3, a=4) }}"),
            "[1B][12][43]");
  EXPECT_EQ(render_text("{% set x %}a{{ 1 + 1 }}{% endset %}{{ x }}|{{ x | length }}"), "a2|2");
  EXPECT_EQ(render_text("{% macro w() %}<{{ caller() }}>{% endmacro %}{% call w() %}in{% endcall %}"), "<in>");
  EXPECT_EQ(render_text("{% macro w() %}<{{ caller() }}>{% endmacro %}{% for x in 'ab' %}{% call w() %}{{ x }}{% endcall %}"
                        "{% endfor %}"),
            "<a><b>");
  EXPECT_EQ(render_text("{% filter upper %}abc{% endfilter %}"), "ABC");
}

TEST(ChatTemplate, PythonValuesPrintAsPython) {
  EXPECT_EQ(render_text("{{ 1 }} {{ 1.0 }} {{ 1/2 }} {{ 4/2 }} {{ 7//2 }} {{ -7 % 3 }} {{ 2**10 }} {{ 1e20 }} {{ 0.1+0.2 }}"),
            "1 1.0 0.5 2.0 3 2 1024 1e+20 0.30000000000000004");
  EXPECT_EQ(render_text("{{ none }} {{ true }} {{ [1, 'a', none] }} {{ {'k': 'v'} }} {{ (1,) }} {{ \"it's\" }}"),
            "None True [1, 'a', None] {'k': 'v'} (1,) it's");
  EXPECT_EQ(render_text("{{ ['it\\'s'] }}"), "[\"it's\"]");
  EXPECT_EQ(render_text("{{ 'a' ~ 1 ~ none }}{{ 'x' * 3 }}{{ [0] * 2 }}"), "a1Nonexxx[0, 0]");
  EXPECT_EQ(render_text("{{ 3.7 | round }} {{ 3.14159 | round(2) }} {{ '42' | int + 1 }} {{ 'x' | float }}"),
            "4.0 3.14 43 0.0");
}

TEST(ChatTemplate, UndefinedBehavesAsJinja2) {
  EXPECT_EQ(render_text("[{{ nothing }}]{{ nothing is defined }}{{ nothing | default('d') }}{{ nothing | length }}"),
            "[]Falsed0");
  EXPECT_EQ(render_text("{{ d.missing }}|{{ d.missing is defined }}", {{"d", nlohmann::ordered_json::object()}}),
            "|False");
  EXPECT_EQ(render_text("{% for x in nothing %}x{% endfor %}{{ 'a' in nothing }}"), "False");
  EXPECT_THROW(render_text("{{ nothing.attr }}"), TemplateError);
  EXPECT_THROW(render_text("{{ nothing + 1 }}"), TemplateError);
  EXPECT_EQ(render_text("{{ n.foo }}|{{ n.foo is defined }}", {{"n", nullptr}}), "|False");
}

TEST(ChatTemplate, FiltersAndTests) {
  EXPECT_EQ(render_text("{{ '  a b  ' | trim }}|{{ 'aXb' | replace('X', '-') }}|{{ 'hello world' | title }}|"
                        "{{ 'hELLO' | capitalize }}|{{ [3, 1, 2] | sort | join(',') }}|{{ [1, 2, 1] | unique | list }}"),
            "a b|a-b|Hello World|Hello|1,2,3|[1, 2]");
  EXPECT_EQ(render_text("{{ users | map(attribute='n') | join(' ') }}|{{ users | selectattr('a') | map(attribute='n') "
                        "| list }}|{{ users | rejectattr('n', 'equalto', 'x') | list | length }}",
                        {{"users", {{{"n", "x"}, {"a", true}}, {{"n", "y"}, {"a", false}}}}}),
            "x y|['x']|1");
  EXPECT_EQ(render_text("{{ [1, 2, 3, 4] | select('odd') | list }}{{ [1, 2] | reject('equalto', 1) | list }}"
                        "{{ {'b': 1, 'a': 2} | dictsort }}{{ -3 | abs }}{{ [1, 2] | first }}{{ 'ab' | last }}"),
            "[1, 3][2][('a', 2), ('b', 1)]31b");
  EXPECT_EQ(render_text("{{ x | tojson }}|{{ x | tojson(indent=2) }}",
                        {{"x", nlohmann::ordered_json::parse(R"({"b": [1, 2.5, null, true, "é\"\n"], "a": {}})")}}),
            "{\"b\": [1, 2.5, null, true, \"é\\\"\\n\"], \"a\": {}}|{\n  \"b\": [\n    1,\n    2.5,\n    null,\n"
            "    true,\n    \"é\\\"\\n\"\n  ],\n  \"a\": {}\n}");
  EXPECT_EQ(render_text("{{ 1 is number }}{{ 'a' is string }}{{ {} is mapping }}{{ [] is iterable }}{{ none is none }}"
                        "{{ 2 is even }}{{ 3 is divisibleby 3 }}{{ 'a' is in 'abc' }}{{ 1 is not string }}"),
            "TrueTrueTrueTrueTrueTrueTrueTrueTrue");
}

TEST(ChatTemplate, StringMethodsSlicingAndUnicode) {
  EXPECT_EQ(render_text("{{ ' a '.strip() }}|{{ 'xxaxx'.lstrip('x') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|"
                        "{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'a-b'.replace('-', '+') }}|"
                        "{{ '{} {}'.format(1, 2) }}|{{ 'ab'.upper() }}"),
            "a|axx|['a', 'b', '', 'c']|['a', 'b']|TrueTrue|a+b|1 2|AB");
  EXPECT_EQ(render_text("{{ 'abcdef'[::-1] }}|{{ 'abcdef'[1:4] }}|{{ 'abcdef'[-2:] }}|{{ [1, 2, 3][:-1] }}|{{ 'abc'[::2] }}"),
            "fedcba|bcd|ef|[1, 2]|ac");
  EXPECT_EQ(render_text("{{ '한국어🦙'[1] }}|{{ '한국어🦙' | length }}|{{ '한국어🦙'[::-1] }}"), "국|4|🦙어국한");
  EXPECT_EQ(render_text("{{ 'ÀÉÿ ŁĄ ΑΣ ДЁ 한' | lower }}|{{ 'café łą αβ жё'.upper() }}"), "àéÿ łą ασ дё 한|CAFÉ ŁĄ ΑΒ ЖЁ");
}

TEST(ChatTemplate, GlobalsOfHuggingFace) {
  EXPECT_EQ(render_text("{{ strftime_now('%d %b %Y') }}"), "20 Feb 2025");
  EXPECT_EQ(render_text("{{ bos_token }}{{ eos_token }}{{ add_generation_prompt }}{{ tools }}"), "<s></s>TrueNone");
  try {
    render_text("line one\n{{ raise_exception('System role not supported') }}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.message(), "raise_exception: System role not supported");
    EXPECT_EQ(e.line(), 2);
  }
}

TEST(ChatTemplate, SyntaxErrorsCarryLineAndColumn) {
  auto error_at = [](std::string_view source) {
    try {
      ChatTemplate t(source);
      return std::string("no error");
    } catch (const TemplateError& e) {
      return std::to_string(e.line()) + ":" + std::to_string(e.column());
    }
  };
  EXPECT_EQ(error_at("ab\n{% if x %}\nc"), "3:2");               // missing endif: at the end
  EXPECT_EQ(error_at("ab\ncd {{ x + }}"), "2:11");               // expression ends early
  EXPECT_EQ(error_at("{% for x in y %}{% endif %}"), "1:20");    // wrong end tag
  EXPECT_EQ(error_at("x\n  {% frobnicate %}"), "2:6");            // unknown statement
  EXPECT_EQ(error_at("{{ 'abc }}"), "1:4");                      // unterminated string
  EXPECT_EQ(error_at("{{ x ) }}"), "1:6");                       // unbalanced
  EXPECT_EQ(error_at("{# never closed"), "1:1");
}

TEST(ChatTemplate, RuntimeErrorsCarryLineAndColumn) {
  try {
    render_text("\n\n  {{ 1 + 'a' }}");
    FAIL() << "no error";
  } catch (const TemplateError& e) {
    EXPECT_EQ(e.line(), 3);
    EXPECT_EQ(e.column(), 8);
    EXPECT_NE(e.message().find("unsupported operand"), std::string::npos);
  }
}

TEST(ChatTemplate, LimitsStopRunawayTemplates) {
  RenderOptions o;
  o.limits.max_steps = 10000;
  EXPECT_THROW(ChatTemplate("{% for i in range(100000) %}{{ i }}{% endfor %}").render(nlohmann::ordered_json::array(), o),
               TemplateError);
  EXPECT_THROW(ChatTemplate("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}").render(nlohmann::ordered_json::array(), o),
               TemplateError);
  EXPECT_THROW(ChatTemplate("{{ " + std::string(100000, '(')), TemplateError);
  RenderOptions small;
  small.limits.max_output_bytes = 1000;
  EXPECT_THROW(ChatTemplate("{{ 'x' * 100000 }}").render(nlohmann::ordered_json::array(), small), TemplateError);
}

TEST(ChatTemplate, RenderChatTakesRolesAndContents) {
  const ChatTemplate chatml = ChatTemplate::chatml();
  EXPECT_EQ(render_chat(chatml, {{"system", "S"}, {"user", "U"}}, true),
            "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(render_chat(chatml, {{"user", "U"}}, false), "<|im_start|>user\nU<|im_end|>\n");
  ChatTemplate t("{{ bos_token }}{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}{{ extra_flag }}");
  t.set_special_tokens("<B>", "<E>");
  EXPECT_EQ(render_chat(t, {{"user", "hi"}}, true, {{"extra_flag", 7}}), "<B>user:hi7");
}

}  // namespace
}  // namespace lumen::chat

namespace lumen::chat {
namespace {

const std::string kTinyGguf = std::string(LUMEN_SHARED_DIR) + "/reference/tiny-qwen2-a.gguf";

struct ToolRun {
  int exit_code;
  std::string out, err;
};

ToolRun run_lumen_gguf(const std::string& args) {
  // ctest runs tests in parallel (and other builds' suites may share the
  // folder): names unique to the test and the process.
  const std::string stem = ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           "." + std::to_string(::getpid());
  const std::string out = stem + ".out", err = stem + ".err";
  const int status =
      std::system((std::string(LUMEN_BINARY_DIR) + "/tools/lumen-gguf " + args + " >" + out + " 2>" + err).c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, read(out), read(err)};
}

std::string write_temp(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                           "." + std::to_string(::getpid()) + "." + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(ChatTemplateGguf, BosAndEosComeFromTheVocabulary) {
  const gguf::File file = gguf::File::open(kTinyGguf);
  auto own = ChatTemplate::from_gguf(file);
  ASSERT_TRUE(own.has_value());
  EXPECT_EQ(own->bos_token(), "<|endoftext|>");
  EXPECT_EQ(own->eos_token(), "<|im_end|>");
  // The Qwen2.5 reference was rendered with exactly these bos/eos texts.
  auto qwen = ChatTemplate::from_gguf(file, read(kSharedDir + "/Qwen-Qwen2.5-7B-Instruct.jinja"));
  const auto conversations = read_json(kSharedDir + "/conversations.json");
  std::vector<Message> messages;
  for (const auto& m : conversations[2]["messages"]) messages.push_back({m["role"], m["content"]});
  EXPECT_EQ(render_chat(*qwen, messages, true), read(kSharedDir + "/Qwen-Qwen2.5-7B-Instruct.conv3.txt"));
}

TEST(ChatTemplateCli, LumenGgufTemplatePrintsTheRenderingExactly) {
  const auto conversations = read_json(kSharedDir + "/conversations.json");
  const std::string m3 = write_temp("conv3.json", conversations[2]["messages"].dump());
  // \uXXXX escapes (surrogate pairs for the emoji) are read too.
  const std::string m4 = write_temp("conv4.json", conversations[3]["messages"].dump(-1, ' ', true));
  const std::string tmpl = kSharedDir + "/meta-llama-Llama-3.1-8B-Instruct.jinja";
  // The GGUF's own template, then --template with the GGUF's bos/eos texts.
  ToolRun own = run_lumen_gguf("template " + kTinyGguf + " --messages " + m3);
  EXPECT_EQ(own.exit_code, 0) << own.err;
  EXPECT_EQ(own.out.rfind("<|im_start|>system\nYou are a concise assistant.", 0), 0u) << own.out;
  ToolRun r = run_lumen_gguf("template " + kTinyGguf + " --messages " + m4 + " --no-generation-prompt --template " +
                             kSharedDir + "/Qwen-Qwen2.5-7B-Instruct.jinja");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, read(kSharedDir + "/Qwen-Qwen2.5-7B-Instruct.conv4.txt"));
  // Tools ride along in an object with "messages".
  const std::string with_tools = write_temp(
      "tools.json", R"({"tools": [{"type": "function", "function": {"name": "f", "parameters": {}}}],
                       "messages": [{"role": "user", "content": "hi"}]})");
  ToolRun t = run_lumen_gguf("template " + kTinyGguf + " --messages " + with_tools + " --template " + tmpl);
  EXPECT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("\"name\": \"f\""), std::string::npos) << t.out;
}

TEST(ChatTemplateCli, ErrorsNameTheTemplateLineAndColumn) {
  const std::string msgs = write_temp("sys.json", R"([{"role": "system", "content": "S"}, {"role": "user", "content": "U"}])");
  ToolRun raised = run_lumen_gguf("template " + kTinyGguf + " --messages " + msgs + " --template " + kSharedDir +
                                  "/google-gemma-2-2b-it.jinja");
  EXPECT_EQ(raised.exit_code, 1);
  EXPECT_NE(raised.err.find("google-gemma-2-2b-it.jinja:1:"), std::string::npos) << raised.err;
  EXPECT_NE(raised.err.find(": error: raise_exception: System role not supported"), std::string::npos) << raised.err;
  const std::string bad = write_temp("bad.jinja", "{% for m in messages %}\n  {{ m.content + }}\n{% endfor %}");
  ToolRun syntax = run_lumen_gguf("template " + kTinyGguf + " --messages " + msgs + " --template " + bad);
  EXPECT_EQ(syntax.exit_code, 1);
  EXPECT_NE(syntax.err.find("bad.jinja:2:18: error: "), std::string::npos) << syntax.err;
  const std::string not_json = write_temp("bad.json", "[{");
  ToolRun j = run_lumen_gguf("template " + kTinyGguf + " --messages " + not_json);
  EXPECT_EQ(j.exit_code, 1);
  EXPECT_NE(j.err.find("not valid JSON"), std::string::npos) << j.err;
}

}  // namespace
}  // namespace lumen::chat
