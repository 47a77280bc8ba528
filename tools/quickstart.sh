#!/usr/bin/env bash
# The main job on a built-in default: build Lumen, synthesize a model with the
# exact Qwen2.5-0.5B layout (random weights, real tokenizer), compile
# dsl/qwen2.dsl for this CPU, and generate from a prompt.
#   bash tools/quickstart.sh [--gguf FILE] [lumen-run flags...]
# With --gguf FILE (e.g. qwen2.5-0.5b-instruct-q8_0.gguf) the real model is used.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bash "$root/tools/deps.sh"
build="$root/build"
cmake -S "$root" -B "$build" >/dev/null
cmake --build "$build" -j"$(nproc)" --target lumenc lumen-run lumen-gguf lumen-bench

gguf=""
if [ "${1:-}" = "--gguf" ]; then gguf=$2; shift 2; fi
mkdir -p "$root/out"
if [ -z "$gguf" ]; then
  gguf="$root/out/qwen2.5-0.5b-synthetic.gguf"
  if [ ! -f "$gguf" ]; then
    "$build/tools/lumen-gguf" synth --preset qwen2.5-0.5b --seed 1 -o "$gguf"
  fi
  echo "lumen: $gguf has random weights: its text is noise. Pass --gguf qwen2.5-0.5b-instruct-q8_0.gguf for real answers." >&2
fi
"$build/tools/lumenc" compile "$root/dsl/qwen2.dsl" -o "$root/out/qwen2.so" --target native
if [ $# -eq 0 ]; then set -- --chat --prompt "Write a haiku about compilers." -n 64; fi
"$build/tools/lumen-run" "$root/out/qwen2.so" --gguf "$gguf" "$@"
