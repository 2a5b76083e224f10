#!/usr/bin/env bash
# The compatibility test (run.mjs) with its npm packages installed once and cached:
# `npm ci` from package-lock.json into ~/.cache/askloop-ci/compat-<hash of the lock file>
# ($ASKLOOP_CI_CACHE moves the cache), linked here as node_modules. A node_modules folder of
# its own (a developer's `npm ci` here) is used as it is.
#
#   tests/compat/run.sh        # ASKLOOP_BIN, else $CARGO_TARGET_DIR/debug/askloop, else target/debug/askloop
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${ASKLOOP_CI_CACHE:-$HOME/.cache/askloop-ci}

if [ ! -d "$here/node_modules" ] || [ -L "$here/node_modules" ]; then
  hash=$(sha256sum "$here/package-lock.json" | cut -c1-16)
  dir="$cache/compat-$hash"
  if [ ! -f "$dir/.complete" ]; then
    mkdir -p "$cache"
    (
      flock 9
      if [ ! -f "$dir/.complete" ]; then
        rm -rf "$dir" && mkdir -p "$dir"
        cp "$here/package.json" "$here/package-lock.json" "$dir/"
        (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error)
        touch "$dir/.complete"
      fi
    ) 9>"$cache/compat.lock"
  fi
  ln -sfn "$dir/node_modules" "$here/node_modules"
fi
exec node "$here/run.mjs"
