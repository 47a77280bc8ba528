// The chat page (GET /) in a real browser: Debian's headless Chromium driven
// by puppeteer-core, against lumen-server on the tiny reference model with an
// API key. It loads the page, sees errors shown, a reply stream in and one
// stopped mid-way (the server counts it cancelled), and saves a screenshot.
//   node chat_page_test.mjs --build B --source S --shared SH --chromium BIN --screenshot PNG
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

import { check, importPinned, parseArgs, runCases, startServer } from "./lumen_server.mjs";

const opts = parseArgs(process.argv.slice(2), ["chromium", "screenshot"]);
for (const need of ["chromium", "screenshot"]) if (!opts[need]) throw new Error(`--${need} is required`);
if (!fs.existsSync(opts.chromium)) throw new Error(`no Chromium at ${opts.chromium}: tools/deps.sh installs Debian's chromium`);
const puppeteer = await importPinned("puppeteer-core");
const key = "page-test-key";
const workDir = path.join(opts.build, "tests", "js", "chat_page");
fs.rmSync(opts.screenshot, { force: true });  // a screenshot is only ever this run's
const server = await startServer(opts, workDir, ["-c", "4096", "-t", "2", "--parallel", "2", "--api-key", key]);
const models = await fetch(server.url + "/v1/models", { headers: { Authorization: `Bearer ${key}` } });
const model = (await models.json()).data[0].id;
const profile = fs.mkdtempSync(path.join(os.tmpdir(), "lumen-chromium-"));
const browser = await puppeteer.launch({
  executablePath: opts.chromium,
  headless: true,
  // Root needs --no-sandbox; the rest keeps a closed-network machine's
  // Chromium from reaching out.
  args: ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", "--no-first-run", `--user-data-dir=${profile}`],
});
const page = await browser.newPage();
await page.setViewport({ width: 1100, height: 760 });
const requests = [];
page.on("request", (r) => requests.push(r.url()));
const pageErrors = [];
page.on("pageerror", (e) => pageErrors.push(e.message));

const texts = (selector) => page.$$eval(selector, (els) => els.map((e) => e.textContent));
const lastError = async () => (await texts(".msg.error .text")).at(-1);

async function sendMessage(text) {
  await page.type("#input", text);
  await page.keyboard.press("Enter");
}
// Sends `text` and waits until one more reply has the class `outcome`.
async function sendAndWait(text, outcome, whileRunning = async () => {}) {
  const selector = `.msg.assistant.${outcome}`;
  const before = (await page.$$(selector)).length;
  await sendMessage(text);
  await whileRunning();
  await page.waitForFunction((s, n) => document.querySelectorAll(s).length > n, { timeout: 60000 }, selector, before);
}
async function setField(id, value) {
  await page.$eval(`#${id}`, (el, v) => { el.value = v; el.dispatchEvent(new Event("change")); }, value);
}

// Records the reply's text each time it changes, inside the page, so that a
// fast model's growth is seen however the test thread is scheduled.
async function recordGrowth() {
  await page.evaluate(() => {
    window.lumenGrowth = [];
    new MutationObserver(() => {
      const reply = [...document.querySelectorAll(".msg.assistant .text")].at(-1);
      if (reply && reply.textContent.length !== (window.lumenGrowth.at(-1) ?? 0))
        window.lumenGrowth.push(reply.textContent.length);
    }).observe(document.getElementById("log"), { childList: true, subtree: true, characterData: true });
  });
}

// Clicks Stop from inside the page once the streaming reply holds more than
// 40 characters, so that the stop lands mid-reply however the test thread is
// scheduled (a busy host once let a 3000-token reply finish first); records
// whether the button was enabled then.
async function stopAfter40Characters() {
  await page.evaluate(() => {
    window.lumenStopEnabled = null;
    const observer = new MutationObserver(() => {
      const text = document.querySelector(".msg.assistant.streaming .text");
      if (!text || text.textContent.length <= 40) return;
      observer.disconnect();
      const stop = document.getElementById("stop");
      window.lumenStopEnabled = !stop.disabled;
      stop.click();
    });
    observer.observe(document.getElementById("log"), { childList: true, subtree: true, characterData: true });
  });
}

const cases = [
  { name: "page_served_from_the_binary", run: async () => {
    const response = await page.goto(server.url + "/", { waitUntil: "load" });
    check(response.status() === 200, `GET / is ${response.status()}`);
    check(response.headers()["content-type"].startsWith("text/html"), "GET / is not text/html");
    check((await page.title()) === "Lumen chat", `title ${await page.title()}`);
    await page.waitForFunction(() => document.getElementById("model").textContent.includes("key"));
  } },
  { name: "wrong_key_shows_the_401_message", run: async () => {
    await setField("key", "not-the-key");
    await sendMessage("Hello?");
    await page.waitForSelector(".msg.error");
    check((await lastError()) === "invalid API key", `error shown: ${await lastError()}`);
    await setField("key", key);
    await page.waitForFunction((m) => document.getElementById("model").textContent === m, {}, model);
  } },
  { name: "bad_setting_shows_the_400_naming_the_field", run: async () => {
    await setField("temperature", "-1");
    await sendMessage("Hello?");
    await page.waitForFunction(() => document.querySelectorAll(".msg.error").length === 2);
    check((await lastError()).includes("temperature"), `error shown: ${await lastError()}`);
    await setField("temperature", "0.8");
  } },
  { name: "reply_streams_in_with_its_speed", run: async () => {
    await setField("system", "You are a test.");
    await setField("seed", "7");
    await setField("max_tokens", "400");
    await recordGrowth();
    await sendAndWait("Tell me a story.", "done");
    const growth = await page.evaluate(() => window.lumenGrowth);
    check(growth.length >= 5, `the text changed only ${growth.length} times: ${growth}`);
    check(growth.every((n, i) => i === 0 || n > growth[i - 1]), `the text did not only grow: ${growth}`);
    const stats = (await texts(".msg.assistant.done .stats")).at(-1);
    check(/^\d+ tokens · [\d.]+ s · [\d.]+ tok\/s · first token [\d.]+ s$/.test(stats), `stats: ${stats}`);
    const reply = (await texts(".msg.assistant.done .text")).at(-1);
    check(reply.length > 0 && reply.length === growth.at(-1), "the final text is not the streamed one");
  } },
  { name: "stop_ends_a_reply_and_the_server_frees_it", run: async () => {
    const cancelled = await server.metric("lumen_requests_cancelled_total");
    await setField("max_tokens", "3000");
    await stopAfter40Characters();
    await sendAndWait("And another, a long one.", "stopped");
    check(await page.evaluate(() => window.lumenStopEnabled) === true, "the stop button is disabled while streaming");
    const stopped = await page.$eval(".msg.assistant.stopped", (m) => ({ text: m.querySelector(".text").textContent,
                                                                         stats: m.querySelector(".stats").textContent }));
    check(stopped.stats.endsWith("· stopped"), `stats: ${stopped.stats}`);
    await server.waitForMetric("lumen_requests_cancelled_total", (v) => v === cancelled + 1);
    await server.waitForMetric("lumen_active_sequences", (v) => v === 0);
    const text = await page.$eval(".msg.assistant.stopped .text", (t) => t.textContent);
    check(text === stopped.text, "the stopped reply changed after the stop");
    check(await page.$eval("#stop", (b) => b.disabled), "the stop button stays enabled");
  } },
  { name: "text_is_never_html", run: async () => {
    await setField("max_tokens", "1");
    await sendAndWait("<b id=injected>bold</b>", "done");
    check((await page.$("#injected")) === null, "a message was parsed as HTML");
    check((await texts(".msg.user .text")).at(-1) === "<b id=injected>bold</b>", "the message text changed");
  } },
  { name: "no_request_leaves_the_server", run: async () => {
    const origin = new URL(server.url).origin;
    const foreign = requests.filter((u) => new URL(u).origin !== origin);
    check(foreign.length === 0, `requests elsewhere: ${foreign}`);
    check(pageErrors.length === 0, `page errors: ${pageErrors}`);
  } },
  { name: "screenshot", run: async () => {
    fs.mkdirSync(path.dirname(opts.screenshot), { recursive: true });
    await page.screenshot({ path: opts.screenshot });
    console.log(`chat page screenshot: ${opts.screenshot}`);
  } },
];

let code = 1;
try {
  code = await runCases(cases, opts);
} finally {
  await browser.close();
  fs.rmSync(profile, { recursive: true, force: true });
  const exit = await server.stop();
  if (exit !== 0) {
    console.log(`lumen-server exited with ${exit}`);
    code = 1;
  }
}
process.exit(code);
