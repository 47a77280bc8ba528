#!/usr/bin/env bash
# Two local lumen-server replicas behind nginx (bench/server/nginx-lumen.conf):
# checks that /health and a completion answer through the balancer and that
# both replicas served requests. Skips (exit 0) when nginx is not installed.
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
  "$build/tools/lumen-server" "$model" --gguf "$gguf" --port 0 --parallel 2 --ctx 512 -t 1 2>"$work/r$i.log" &
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
for i in 1 2; do
  n=$(curl -sf "http://127.0.0.1:${ports[$((i - 1))]}/metrics" | sed -n 's/^lumen_requests_total \(.*\)/\1/p')
  echo "replicas: replica $i served $n requests"
  [ "${n%.*}" -gt 0 ] || { echo "replicas: replica $i served nothing" >&2; exit 1; }
done
echo "replicas: ok"
