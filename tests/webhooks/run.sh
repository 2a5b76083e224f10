#!/usr/bin/env bash
# Webhook signatures checked by an independent Standard Webhooks implementation (issue 34): the
# Python `standardwebhooks` package (PyPI) verifies what askloop sends. A run asks a question
# (`askloop run`, a scripted model), `askloop runs sweep` delivers its `question.raised` event to
# a local receiver (receiver.py) per askloop.toml's [[webhooks]]; the receiver verifies the
# signature with the package, and checks that another secret does not verify it.
#
#   tests/webhooks/run.sh            # uses $ASKLOOP_BIN, else $CARGO_TARGET_DIR/debug/askloop, else target/debug/askloop
#
# The package is installed once into ~/.cache/askloop-ci/webhooks-<hash of requirements.txt>
# ($ASKLOOP_CI_CACHE moves the cache). Exit status 0 when every request verified.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
bin=${ASKLOOP_BIN:-${CARGO_TARGET_DIR:-$repo/target}/debug/askloop}
cache=${ASKLOOP_CI_CACHE:-$HOME/.cache/askloop-ci}

[ -x "$bin" ] || { echo "webhooks: no askloop binary at $bin (build it, or set ASKLOOP_BIN)" >&2; exit 1; }

# --- standardwebhooks, once per requirements.txt ------------------------------------------------
hash=$(sha256sum "$here/requirements.txt" | cut -c1-16)
venv="$cache/webhooks-$hash"
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
  ) 9>"$cache/webhooks.lock"
fi

# --- the receiver ---------------------------------------------------------------------------------
tmp=$(mktemp -d)
receiver_pid=
cleanup() {
  if [ -n "$receiver_pid" ]; then kill "$receiver_pid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

secret="whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"
"$venv/bin/python" "$here/receiver.py" "$secret" "$tmp/received.jsonl" "$tmp/port" &
receiver_pid=$!
for _ in $(seq 1 100); do [ -s "$tmp/port" ] && break; sleep 0.05; done
[ -s "$tmp/port" ] || { echo "webhooks: the receiver did not start" >&2; exit 1; }
port=$(cat "$tmp/port")

cat >"$tmp/script.json" <<'JSON'
{"steps": [
  {"toolCalls": [{"id": "c1", "name": "ask_user", "args": {"question": "Which repo?", "options": [{"label": "main"}, {"label": "docs"}]}}]},
  {"text": "Summary of the chosen repo."}
]}
JSON
cat >"$tmp/askloop.toml" <<TOML
model = "scripted:script.json"
store = "sqlite://runs.db"

[[webhooks]]
url = "http://127.0.0.1:$port/hook"
secret = "$secret"
TOML

# In the scratch folder, so that no askloop.toml of the caller's is read. Without a terminal the
# run stops at its question.
(cd "$tmp" && "$bin" run "Summarize my project" </dev/null >/dev/null)
(cd "$tmp" && "$bin" runs sweep)

python3 - "$tmp/received.jsonl" <<'PY'
import json, sys
records = [json.loads(line) for line in open(sys.argv[1], encoding="utf-8")]
assert records, "no request reached the receiver"
for record in records:
    assert record["ok"], f"a signature did not verify: {record}"
    assert record["wrongSecretRefused"], f"another secret verified: {record}"
    assert record["id"] == record["payloadId"], f"webhook-id is not the event id: {record}"
types = [record["type"] for record in records]
assert types == ["question.raised"], types
print(f"webhooks: {len(records)} request(s) verified by the Python standardwebhooks package")
PY
