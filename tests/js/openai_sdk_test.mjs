// The official OpenAI SDK for Node (npm `openai`, pinned in package.json)
// against lumen-server on the tiny reference model (random weights, so the
// text is noise: the cases check shapes, equalities and constraints, not
// words). One named case per feature; --only / --skip pick some for a local run.
//   node openai_sdk_test.mjs --build B --source S --shared SH
import { spawnSync } from "node:child_process";
import path from "node:path";

import { check, importPinned, parseArgs, runCases, startServer } from "./lumen_server.mjs";

const OpenAI = await importPinned("openai");
const opts = parseArgs(process.argv.slice(2));
const key = "sdk-test-key";
const gguf = path.join(opts.shared, "reference", "tiny-qwen2-a.gguf");
const server = await startServer(opts, path.join(opts.build, "tests", "js", "openai_sdk"),
                                 ["-c", "1024", "-t", "2", "--parallel", "4", "--api-key", key]);
const client = new OpenAI({ baseURL: server.url + "/v1", apiKey: key, maxRetries: 0 });
const model = (await client.models.list()).data[0].id;
const user = (content) => [{ role: "user", content }];

// The model's width, from the GGUF itself.
function embeddingLength() {
  const info = spawnSync(path.join(opts.build, "tools", "lumen-gguf"), ["info", gguf], { encoding: "utf8" });
  const m = info.stdout.match(/\.embedding_length = (\d+)/);
  if (!m) throw new Error(`lumen-gguf info names no embedding_length: ${info.stderr}`);
  return Number(m[1]);
}

async function greedy(content, extra = {}) {
  return client.chat.completions.create({ model, messages: user(content), temperature: 0, max_tokens: 24, ...extra });
}

// The tool every tool case declares; its arguments are bounded so that a
// random-weight model's call ends well within max_tokens.
const weatherTool = {
  type: "function",
  function: {
    name: "get_weather",
    description: "The weather in a city",
    parameters: {
      type: "object",
      properties: { city: { type: "string", maxLength: 16 }, unit: { enum: ["celsius", "fahrenheit"] } },
      required: ["city", "unit"],
      additionalProperties: false,
    },
  },
};
const otherTool = {
  type: "function",
  function: { name: "get_time", parameters: { type: "object", properties: { zone: { enum: ["utc", "local"] } },
                                              required: ["zone"], additionalProperties: false } },
};
function checkWeatherCall(call, where) {
  check(call.type === "function" && typeof call.id === "string" && call.id.length > 0, `${where}: ${JSON.stringify(call)}`);
  check(call.function.name === "get_weather", `${where}: called ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  check(typeof args.city === "string" && args.city.length <= 16, `${where}: city ${JSON.stringify(args.city)}`);
  check(["celsius", "fahrenheit"].includes(args.unit), `${where}: unit ${JSON.stringify(args.unit)}`);
  check(Object.keys(args).length === 2, `${where}: arguments ${call.function.arguments}`);
}

const cases = [
  { name: "chat", run: async () => {
    const r = await greedy("Hello", { max_tokens: 8 });
    check(r.object === "chat.completion" && r.choices.length === 1, JSON.stringify(r));
    const c = r.choices[0];
    check(c.message.role === "assistant" && typeof c.message.content === "string", JSON.stringify(c));
    check(["stop", "length"].includes(c.finish_reason), `finish_reason ${c.finish_reason}`);
    check(r.usage.completion_tokens >= 1 && r.usage.completion_tokens <= 8 && r.usage.prompt_tokens > 0,
          JSON.stringify(r.usage));
  } },
  { name: "streaming_with_usage", run: async () => {
    const whole = await greedy("Stream this");
    const stream = await client.chat.completions.create({ model, messages: user("Stream this"), temperature: 0,
                                                          max_tokens: 24, stream: true,
                                                          stream_options: { include_usage: true } });
    let text = "", finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      check(chunk.object === "chat.completion.chunk", chunk.object);
      if (chunk.usage) usage = chunk.usage;
      const c = chunk.choices[0];
      if (!c) continue;
      if (c.delta.content) text += c.delta.content;
      if (c.finish_reason) finish = c.finish_reason;
      ++chunks;
    }
    check(chunks > 2, `${chunks} chunks`);
    check(text === whole.choices[0].message.content, "the streamed text is not the non-streamed one");
    check(finish === whole.choices[0].finish_reason, `finish_reason ${finish}`);
    check(usage && usage.completion_tokens === whole.usage.completion_tokens, `usage ${JSON.stringify(usage)}`);
  } },
  { name: "seeded_sampling_repeats", run: async () => {
    const ask = () => client.chat.completions.create({ model, messages: user("Once upon a time"), temperature: 1,
                                                       top_p: 0.9, seed: 1234, max_tokens: 24 });
    const [a, b] = [await ask(), await ask()];
    check(a.choices[0].message.content.length > 0, "empty text");
    check(a.choices[0].message.content === b.choices[0].message.content, "one seed gave two texts");
  } },
  { name: "stop_strings", run: async () => {
    const full = (await greedy("Count with me", { max_tokens: 32 })).choices[0].message.content;
    // A stop string from the second half of the text, without U+FFFD.
    let at = Math.floor(full.length / 2);
    while (at + 3 <= full.length && full.slice(at, at + 3).includes("\uFFFD")) ++at;
    check(at + 3 <= full.length, `no stop string in ${JSON.stringify(full)}`);
    const stop = full.slice(at, at + 3);
    const r = await greedy("Count with me", { max_tokens: 32, stop: [stop, "never appears 123"] });
    check(r.choices[0].finish_reason === "stop", `finish_reason ${r.choices[0].finish_reason}`);
    check(r.choices[0].message.content === full.slice(0, full.indexOf(stop)),
          `${JSON.stringify(r.choices[0].message.content)} is not the text before ${JSON.stringify(stop)}`);
  } },
  { name: "logprobs", run: async () => {
    const r = await greedy("Score me", { max_tokens: 6, logprobs: true, top_logprobs: 3 });
    const content = r.choices[0].logprobs.content;
    check(content.length === r.usage.completion_tokens, `${content.length} entries`);
    for (const t of content) {
      check(typeof t.token === "string" && Array.isArray(t.bytes) && t.logprob <= 0, JSON.stringify(t));
      check(t.top_logprobs.length === 3, `${t.top_logprobs.length} top logprobs`);
      check(t.top_logprobs[0].logprob === t.logprob, "a greedy token is not its distribution's top one");
    }
  } },
  { name: "bad_parameter_is_a_BadRequestError", run: async () => {
    try {
      await greedy("Hello", { temperature: -1 });
    } catch (e) {
      check(e instanceof OpenAI.BadRequestError && e.status === 400, `${e.constructor.name} ${e.status}`);
      check(e.message.includes("temperature"), `message: ${e.message}`);
      return;
    }
    throw new Error("temperature -1 was accepted");
  } },
  { name: "wrong_key_is_an_AuthenticationError", run: async () => {
    const stranger = new OpenAI({ baseURL: server.url + "/v1", apiKey: "not-the-key", maxRetries: 0 });
    try {
      await stranger.chat.completions.create({ model, messages: user("Hello"), max_tokens: 1 });
    } catch (e) {
      check(e instanceof OpenAI.AuthenticationError && e.status === 401, `${e.constructor.name} ${e.status}`);
      return;
    }
    throw new Error("a wrong key was accepted");
  } },
  { name: "aborted_stream_frees_its_slot", run: async () => {
    const cancelled = await server.metric("lumen_requests_cancelled_total");
    const stream = await client.chat.completions.create({ model, messages: user("Go on and on"), max_tokens: 900,
                                                          ignore_eos: true, stream: true });
    let chunks = 0;
    for await (const chunk of stream) {
      check(!chunk.choices[0].finish_reason, "the stream ended before the abort");
      if (++chunks === 5) stream.controller.abort();
    }
    await server.waitForMetric("lumen_requests_cancelled_total", (v) => v === cancelled + 1);
    await server.waitForMetric("lumen_active_sequences", (v) => v === 0);
  } },
  { name: "tools_required_gives_a_call", run: async () => {
    const r = await client.chat.completions.create({ model, messages: user("Weather in Paris?"), tools: [weatherTool],
                                                     tool_choice: "required", max_tokens: 400, seed: 1 });
    const c = r.choices[0];
    check(c.finish_reason === "tool_calls", `finish_reason ${c.finish_reason}`);
    check(c.message.tool_calls && c.message.tool_calls.length >= 1, JSON.stringify(c.message));
    for (const call of c.message.tool_calls) checkWeatherCall(call, "tool_calls");
  } },
  { name: "tools_required_streamed", run: async () => {
    const stream = await client.chat.completions.create({ model, messages: user("Weather in Oslo?"), tools: [weatherTool],
                                                          tool_choice: "required", parallel_tool_calls: false,
                                                          max_tokens: 400, seed: 2, stream: true });
    const calls = [];
    let finish = null;
    for await (const chunk of stream) {
      const c = chunk.choices[0];
      if (!c) continue;
      if (c.finish_reason) finish = c.finish_reason;
      for (const d of c.delta.tool_calls ?? []) {
        const call = (calls[d.index] ??= { id: "", type: "", function: { name: "", arguments: "" } });
        if (d.id) call.id = d.id;
        if (d.type) call.type = d.type;
        if (d.function?.name) call.function.name += d.function.name;
        if (d.function?.arguments) call.function.arguments += d.function.arguments;
      }
    }
    check(finish === "tool_calls", `finish_reason ${finish}`);
    check(calls.length === 1, `${calls.length} calls without parallel_tool_calls`);
    checkWeatherCall(calls[0], "delta.tool_calls");
  } },
  { name: "tool_choice_named_function", run: async () => {
    const r = await client.chat.completions.create({ model, messages: user("Anything"), tools: [otherTool, weatherTool],
                                                     tool_choice: { type: "function", function: { name: "get_weather" } },
                                                     max_tokens: 400, seed: 3 });
    check(r.choices[0].finish_reason === "tool_calls", `finish_reason ${r.choices[0].finish_reason}`);
    for (const call of r.choices[0].message.tool_calls) checkWeatherCall(call, "tool_calls");
  } },
  { name: "json_schema_gives_json", run: async () => {
    const schema = {
      type: "object",
      properties: { answer: { enum: ["yes", "no"] }, confidence: { type: "integer", minimum: 0, maximum: 100 } },
      required: ["answer", "confidence"],
      additionalProperties: false,
    };
    const r = await client.chat.completions.create({ model, messages: user("Is it raining?"), max_tokens: 400, seed: 4,
                                                     response_format: { type: "json_schema",
                                                                        json_schema: { name: "verdict", strict: true, schema } } });
    check(r.choices[0].finish_reason === "stop", `finish_reason ${r.choices[0].finish_reason}`);
    const value = JSON.parse(r.choices[0].message.content);
    check(["yes", "no"].includes(value.answer), `answer ${JSON.stringify(value.answer)}`);
    check(Number.isInteger(value.confidence) && value.confidence >= 0 && value.confidence <= 100,
          `confidence ${JSON.stringify(value.confidence)}`);
    check(Object.keys(value).length === 2, `keys ${Object.keys(value)}`);
  } },
  { name: "n_2_gives_two_choices", run: async () => {
    const r = await client.chat.completions.create({ model, messages: user("Pick a word"), n: 2, max_tokens: 8, seed: 5 });
    check(r.choices.length === 2, `${r.choices.length} choices`);
    check(r.choices.map((c) => c.index).join() === "0,1", `indices ${r.choices.map((c) => c.index)}`);
    for (const c of r.choices) check(typeof c.message.content === "string" && c.finish_reason, JSON.stringify(c));
  } },
  { name: "embeddings", run: async () => {
    const width = embeddingLength();
    // The SDK asks for base64 and decodes it to floats.
    const r = await client.embeddings.create({ model, input: ["hello world", "a second, longer input text"] });
    check(r.data.length === 2 && r.data.map((d) => d.index).join() === "0,1", `${r.data.length} vectors`);
    for (const d of r.data) {
      check(d.embedding.length === width, `${d.embedding.length} floats, the model has ${width}`);
      check(d.embedding.every(Number.isFinite), "a value is not finite");
      const norm = Math.hypot(...d.embedding);
      check(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
    }
    check(r.data[0].embedding.some((v, i) => v !== r.data[1].embedding[i]), "two inputs gave one vector");
  } },
];

let code = 1;
try {
  code = await runCases(cases, opts);
} finally {
  const exit = await server.stop();
  if (exit !== 0) {
    console.log(`lumen-server exited with ${exit}`);
    code = 1;
  }
}
process.exit(code);
