#!/usr/bin/env bash
# Property-based requests against `askloop serve`'s own OpenAPI document (schemathesis, PyPI):
# no 5xx, and every response matches the document (status code, content type, body schema).
#
#   tests/schemathesis/run.sh            # uses $ASKLOOP_BIN, else $CARGO_TARGET_DIR/debug/askloop, else target/debug/askloop
#
# schemathesis is installed once into ~/.cache/askloop-ci/schemathesis-<hash of requirements.txt>
# ($ASKLOOP_CI_CACHE moves the cache). The server listens on loopback with a scripted model and a
# fresh SQLite store. Bounded: SCHEMATHESIS_MAX_EXAMPLES (30) cases per operation, a fixed seed
# (SCHEMATHESIS_SEED, 1), and a 240 s limit on the whole run. Exit status: schemathesis's.
# `GET /api/inbox/events` is left out: a live SSE feed never ends, so every request would time out.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${ASKLOOP_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/askloop}
cache=${ASKLOOP_CI_CACHE:-$HOME/.cache/askloop-ci}
max_examples=${SCHEMATHESIS_MAX_EXAMPLES:-30}
seed=${SCHEMATHESIS_SEED:-1}

[ -x "$bin" ] || { echo "schemathesis: no askloop binary at $bin (build it, or set ASKLOOP_BIN)" >&2; exit 1; }

# --- schemathesis, once per requirements.txt ---------------------------------------------------
hash=$(sha256sum "$here/requirements.txt" | cut -c1-16)
venv="$cache/schemathesis-$hash"
# Built in place under a lock (concurrent runs install once); `.complete` is written last, so a
# half-built venv is never used.
if [ ! -f "$venv/.complete" ]; then
  mkdir -p "$cache"
  (
    flock 9
    if [ ! -f "$venv/.complete" ]; then
      rm -rf "$venv"
      python3 -m venv "$venv"
      "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$here/requirements.txt"
      touch "$venv/.complete"
    fi
  ) 9>"$cache/schemathesis.lock"
fi

# --- the server -----------------------------------------------------------------------------------
tmp=$(mktemp -d)
server_pid=
cleanup() {
  if [ -n "$server_pid" ] && kill -0 "$server_pid" 2>/dev/null; then
    kill -TERM "$server_pid" 2>/dev/null || true
    for _ in $(seq 1 50); do kill -0 "$server_pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$server_pid" 2>/dev/null || true
  fi
  rm -rf "$tmp"
}
trap cleanup EXIT

cat >"$tmp/script.json" <<'EOF'
{"steps": [
  {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Which repo?", "options": [{"label": "main"}, {"label": "docs"}]}}]},
  {"text": "Summary of the chosen repo."}
]}
EOF
# In the scratch folder, so that no askloop.toml of the caller's is read.
(cd "$tmp" && exec "$bin" serve --addr 127.0.0.1:0 --model "scripted:$tmp/script.json" \
  --store "sqlite://$tmp/askloop.db" >"$tmp/stdout" 2>"$tmp/stderr") &
server_pid=$!

# `askloop serve: listening on http://ADDR ...` is the first line on stdout.
base=
for _ in $(seq 1 300); do
  base=$(grep -o -m1 'listening on http://[^ ,;]*' "$tmp/stdout" 2>/dev/null | sed 's/^listening on //; s:/$::' || true)
  [ -n "$base" ] && break
  kill -0 "$server_pid" 2>/dev/null || break
  sleep 0.1
done
if [ -z "$base" ]; then
  echo "schemathesis: askloop serve did not say where it listens; its output:" >&2
  cat "$tmp/stdout" "$tmp/stderr" >&2
  exit 1
fi
echo "askloop serve at $base"

# --- the run --------------------------------------------------------------------------------------
status=0
# From the scratch folder: schemathesis keeps a cache folder (.schemathesis) where it runs.
(cd "$tmp" && exec timeout 240 "$venv/bin/schemathesis" --config-file "$here/schemathesis.toml" run "$base/openapi.json" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance \
  --max-examples "$max_examples" \
  --seed "$seed" \
  --workers 2 \
  --request-timeout 10 \
  --exclude-path-regex '/events$' \
  --generation-database none \
  --no-color) || status=$?
if [ "$status" -ne 0 ]; then
  echo "schemathesis: failed (exit $status); the server's last log lines:" >&2
  tail -n 40 "$tmp/stderr" >&2 || true
fi
exit "$status"
