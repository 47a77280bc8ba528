#!/usr/bin/env bash
# Two local lumen-server replicas behind nginx (bench/server/nginx-lumen.conf):
# checks that /health and a completion answer through the balancer and that
# both replicas served requests, then measures the prefix cache through it: a
# conversation's second turn with its X-Session-Id (back to the replica that
# holds its prefix: a hit) and with a key that the hash sends to the other
# replica (a miss). Skips (exit 0) when nginx is not installed.
# Usage: bench/server/replicas.sh BUILD_DIR MODEL.so MODEL.gguf
set -euo pipefail
build=$1 model=$2 gguf=$3
here=$(cd "$(dirname "$0")" && pwd)
command -v nginx >/dev/null || { echo "replicas: nginx is not installed; skipped"; exit 0; }
work=$(mktemp -d)
pids=()
cleanup() {
  [ -f "$work/nginx.pid" ] && kill "$(cat "$work/nginx.pid")" 2>/dev/null || true
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait || true
  rm -rf "$work"
}
trap cleanup EXIT
ports=()
for i in 1 2; do
  "$build/tools/lumen-server" "$model" --gguf "$gguf" --port 0 --parallel 2 --ctx 2048 -t 1 2>"$work/r$i.log" &
  pids+=($!)
done
for i in 1 2; do
  port=""
  for _ in $(seq 1 600); do
    port=$(sed -n 's/.*listening on http:\/\/127.0.0.1:\([0-9]*\).*/\1/p' "$work/r$i.log")
    [ -n "$port" ] && curl -sf "http://127.0.0.1:$port/health" >/dev/null 2>&1 && break
    sleep 0.2
  done
  ports+=("$port")
done
front=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
sed -e "s|@PORT@|$front|" -e "s|@REPLICA1@|${ports[0]}|" -e "s|@REPLICA2@|${ports[1]}|" -e "s|@PREFIX@|$work|g" \
  "$here/nginx-lumen.conf" >"$work/nginx.conf"
nginx -c "$work/nginx.conf" -p "$work"
sleep 0.5
curl -sf "http://127.0.0.1:$front/health" >/dev/null
clients=()
for _ in $(seq 1 8); do
  curl -sf "http://127.0.0.1:$front/v1/completions" -d '{"prompt":"Hello","max_tokens":4}' >/dev/null &
  clients+=($!)
done
for c in "${clients[@]}"; do wait "$c"; done
metric() {  # metric REPLICA(1|2) NAME
  curl -sf "http://127.0.0.1:${ports[$(($1 - 1))]}/metrics" | sed -n "s/^$2 \\(.*\\)/\\1/p" | cut -d. -f1
}
for i in 1 2; do
  n=$(metric "$i" lumen_requests_total)
  echo "replicas: replica $i served $n requests"
  [ "$n" -gt 0 ] || { echo "replicas: replica $i served nothing" >&2; exit 1; }
done

# Which replica a session key lands on: the one whose request count moves.
replica_of() {
  local before
  before=$(metric 1 lumen_requests_total)
  curl -sf "http://127.0.0.1:$front/v1/completions" -H "X-Session-Id: $1" -d '{"prompt":"Hi","max_tokens":1}' >/dev/null
  [ "$(metric 1 lumen_requests_total)" -gt "$before" ] && echo 1 || echo 2
}
home=$(replica_of conversation-1)
other_key=""
for k in $(seq 1 64); do
  [ "$(replica_of "probe-$k")" != "$home" ] && { other_key="probe-$k"; break; }
done
[ -n "$other_key" ] || { echo "replicas: every key hashes to replica $home" >&2; exit 1; }
bench="$build/bench/server/lumen-server-bench"
reused() { echo $(($(metric 1 lumen_prefix_cache_reused_tokens_total) + $(metric 2 lumen_prefix_cache_reused_tokens_total))); }
run_prefix() {  # run_prefix LABEL LATER_KEY
  local before
  before=$(reused)
  "$bench" --port "$front" --scenario prefix --turns 2 --system-words 1500 --tokens 8 --label "$1" \
    --session conversation-1 --later-session "$2" | sed -n '3,4p'
  echo "replicas: $1: $(($(reused) - before)) prompt tokens reused from the prefix cache"
}
echo "replicas: conversation-1 lives on replica $home; $other_key hashes to the other"
run_prefix "same key" conversation-1
run_prefix "other key" "$other_key"
echo "replicas: ok"
