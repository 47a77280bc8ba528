// Fuzz target: the chat-template interpreter on arbitrary template sources,
// rendered over a fixed conversation with tools (system, user, assistant with
// tool calls, tool result). Every input must parse or fail with a
// TemplateError; rendering must finish within the step, depth and output
// limits or fail with one. Any other exception, crash or hang is a bug.
#include <cstdint>
#include <string_view>

#include "lumen/text/chat_template.h"

namespace {

const nlohmann::ordered_json& conversation() {
  static const nlohmann::ordered_json messages = nlohmann::ordered_json::parse(R"([
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "  안녕 🦙 \"q\" \\ <b>&amp;</b>\n"},
    {"role": "assistant", "content": null, "tool_calls": [
      {"id": "call12345", "type": "function", "function": {"name": "f", "arguments": {"x": 1.5, "y": [true, null]}}}]},
    {"role": "tool", "tool_call_id": "call12345", "content": "42"},
    {"role": "user", "content": "ok"}])");
  return messages;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view source(reinterpret_cast<const char*>(data), size);
  lumen::chat::RenderOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.now = 1740052800;
  options.extra = {{"tools", {{{"type", "function"}, {"function", {{"name", "f"}, {"parameters", {{"type", "object"}}}}}}}}};
  // Small limits keep each input fast; the limits themselves are under test.
  options.limits.max_steps = 20000;
  options.limits.max_output_bytes = 1 << 20;
  options.limits.max_call_depth = 64;
  try {
    const lumen::chat::ChatTemplate tmpl(source);
    (void)tmpl.render(conversation(), options);
  } catch (const lumen::chat::TemplateError&) {
  }
  return 0;
}
