// What the JS tests share: their command line, a lumen-server child process on
// the shared tiny model (its model.so compiled by the build's lumenc), and a
// runner of named cases that ends with the plain "N passed, N failed" line.
import { spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";
import { fileURLToPath } from "node:url";

// --build DIR --source DIR --shared DIR, plus the options a test names
// (`--name value`); --only a,b and --skip a,b pick cases for local runs.
export function parseArgs(argv, extra = []) {
  const known = ["build", "source", "shared", "only", "skip", ...extra];
  const out = {};
  for (let i = 0; i < argv.length; i += 2) {
    const name = argv[i].replace(/^--/, "");
    if (!known.includes(name) || i + 1 >= argv.length) throw new Error(`usage: --${known.join(" V --")} V (got ${argv[i]})`);
    out[name] = argv[i + 1];
  }
  for (const need of ["build", "source", "shared"]) if (!out[need]) throw new Error(`--${need} is required`);
  return out;
}

// Starts lumen-server on the tiny reference model with `args`; resolves once
// /health is 200. Its pack cache and model.so live in `workDir`.
export async function startServer(opts, workDir, args) {
  fs.rmSync(workDir, { recursive: true, force: true });
  fs.mkdirSync(workDir, { recursive: true });
  const gguf = path.join(opts.shared, "reference", "tiny-qwen2-a.gguf");
  if (!fs.existsSync(gguf)) throw new Error(`the shared reference model is missing: ${gguf}`);
  const modelSo = path.join(workDir, "qwen2.so");
  const compiled = spawnSync(path.join(opts.build, "tools", "lumenc"),
                             ["compile", path.join(opts.source, "dsl", "qwen2.dsl"), "-o", modelSo], { encoding: "utf8" });
  if (compiled.status !== 0) throw new Error(`lumenc compile failed: ${compiled.stderr || compiled.error}`);

  const child = spawn(path.join(opts.build, "tools", "lumen-server"), [modelSo, "-m", gguf, "--port", "0", ...args], {
    env: { ...process.env, LUMEN_CACHE_DIR: path.join(workDir, "pack_cache") },
    stdio: ["ignore", "inherit", "pipe"],
  });
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  const url = await new Promise((resolve, reject) => {
    const lines = readline.createInterface({ input: child.stderr });
    lines.on("line", (line) => {
      process.stderr.write(line + "\n");
      const m = line.match(/listening on (http:\/\/\S+)/);
      if (m) resolve(m[1]);
    });
    exited.then((code) => reject(new Error(`lumen-server exited (${code}) before listening`)));
  });
  for (let i = 0; ; ++i) {
    const health = await fetch(url + "/health").catch(() => null);
    if (health && health.status === 200) break;
    if (i === 600) throw new Error("lumen-server never became ready");
    await sleep(50);
  }
  return {
    url,
    // One value of /metrics (Prometheus text).
    async metric(name) {
      const text = await (await fetch(url + "/metrics")).text();
      const m = text.match(new RegExp(`^${name} (\\S+)$`, "m"));
      if (!m) throw new Error(`/metrics has no ${name}`);
      return Number(m[1]);
    },
    // Polls until metric(name) satisfies `ok`, for up to `ms`.
    async waitForMetric(name, ok, ms = 10000) {
      const end = Date.now() + ms;
      for (;;) {
        const value = await this.metric(name);
        if (ok(value)) return value;
        if (Date.now() > end) throw new Error(`${name} stayed at ${value}`);
        await sleep(50);
      }
    },
    // SIGTERM; resolves with the exit code.
    async stop() {
      child.kill("SIGTERM");
      const timer = setTimeout(() => child.kill("SIGKILL"), 20000);
      const code = await exited;
      clearTimeout(timer);
      return code;
    },
  };
}

// A package pinned in package-lock.json (missing: `npm ci` has not run).
export async function importPinned(name) {
  const dir = path.join(path.dirname(fileURLToPath(import.meta.url)), "node_modules", name);
  if (!fs.existsSync(dir)) throw new Error(`${name} is not installed: npm ci --prefix tests/js (tools/deps.sh runs it)`);
  return (await import(name)).default;
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function check(condition, message) {
  if (!condition) throw new Error(message);
}

// Runs each named case in order (a failure does not stop the others) and
// prints one line per case, then "N passed, N failed". Returns the exit code.
export async function runCases(cases, opts) {
  const only = opts.only ? opts.only.split(",") : null;
  const skip = opts.skip ? opts.skip.split(",") : [];
  for (const name of [...(only ?? []), ...skip])
    if (!cases.some((c) => c.name === name)) throw new Error(`no case named ${name}`);
  let passed = 0, failed = 0;
  for (const { name, run } of cases) {
    if ((only && !only.includes(name)) || skip.includes(name)) continue;
    const start = Date.now();
    try {
      await run();
      ++passed;
      console.log(`ok   ${name} (${Date.now() - start} ms)`);
    } catch (e) {
      ++failed;
      console.log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
    }
  }
  console.log(`${passed} passed, ${failed} failed`);
  return failed === 0 && passed > 0 ? 0 : 1;
}
