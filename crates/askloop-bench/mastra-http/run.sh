#!/usr/bin/env bash
# Starts the reference framework's HTTP server (server.mjs) for `askloop-bench http --url`.
# Installs once into ~/.cache/askloop-bench-mastra-http (npm ci from package-lock.json).
# Usage: crates/askloop-bench/mastra-http/run.sh [PORT] [DB]   (runs in the foreground)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ASKLOOP_MASTRA_HTTP_CACHE:-$HOME/.cache/askloop-bench-mastra-http}
mkdir -p "$cache"
if ! cmp -s "$here/package-lock.json" "$cache/package-lock.json" || [ ! -d "$cache/node_modules" ]; then
  cp "$here/package.json" "$here/package-lock.json" "$cache/"
  (cd "$cache" && npm ci --silent --no-audit --no-fund)
fi
cp "$here/server.mjs" "$cache/"
cd "$cache"
PORT=${1:-4112} DB=${2:-$(mktemp -d)/mastra.db} exec node server.mjs
