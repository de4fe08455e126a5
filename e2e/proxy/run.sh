#!/usr/bin/env bash
# End-to-end suite for `retryscope proxy` (issue 14): real clients (gemini-cli, Claude Code,
# Codex, Qwen Code from npm; the official `openai` and `anthropic` Python SDKs from PyPI driving
# e2e/proxy/sdk_loop.py) talk to a local mock upstream that never cuts, through the proxy,
# which cuts the first stream (--inject after-tool-call|mid-word|before-finish,
# --inject-how reset|eof|error). What the proxy reports (/metrics, findings, its --record
# folder read by `check`) is compared with what the clients really did: the marker files
# their tools wrote (e2e/proxy/compare.py).
#
#   e2e/proxy/run.sh                         every client x every scenario
#   CLIENTS="sdk-anthropic codex" SCENARIOS="clean after-tool-call-reset" e2e/proxy/run.sh
#   e2e/proxy/run.sh --check DIR             compare an earlier run's folder again
#
# Environment: RETRYSCOPE_E2E_CACHE (npm prefix and the Python venv, default
# ~/.cache/retryscope-e2e), RETRYSCOPE_BIN (default target/debug/retryscope, built first),
# E2E_TIMEOUT (seconds per client run), E2E_OUT (keep the run's folders there),
# E2E_JOBS (clients run in parallel, default 6: a session mostly waits on its client's
# retries; two at a time kept 0.7 of a core busy and took 266 s for six clients, six 125 s).
# The last line is `N passed, N failed`. Exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/e2e/proxy
CACHE=${RETRYSCOPE_E2E_CACHE:-$HOME/.cache/retryscope-e2e}
BIN=${RETRYSCOPE_BIN:-$ROOT/target/debug/retryscope}
TIMEOUT=${E2E_TIMEOUT:-90}
JOBS=${E2E_JOBS:-6}
ALL_CLIENTS="sdk-anthropic sdk-openai-chat sdk-openai-responses claude-code codex gemini-cli qwen-code"
ALL_SCENARIOS="clean after-tool-call-reset after-tool-call-eof after-tool-call-error mid-word-reset mid-word-eof mid-word-error before-finish-reset before-finish-eof before-finish-error"
# the SDK loops also get three cuts in a row: they give up after 3 tries, so the turn ends
# retried, with no later request to show what the client kept; and `slow-tool`, no cut but a
# tool that runs longer than the proxy's idle timeout (a long build: its turn must wait for
# the next request, which shows the execution)
# (SDK_EXTRA= to leave them out; with SCENARIOS= set, only SDK_EXTRA if given)
if [ -z "${SCENARIOS:-}" ]; then SDK_EXTRA=${SDK_EXTRA-mid-word-error-first3 slow-tool}; else SDK_EXTRA=${SDK_EXTRA:-}; fi
CLIENTS=${CLIENTS:-$ALL_CLIENTS}
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}
scenarios_of() { case $1 in sdk-*) echo "$SCENARIOS $SDK_EXTRA" ;; *) echo "$SCENARIOS" ;; esac; }
# Pinned: the npm clients as in e2e/agents/run.sh, the SDKs here.
PY_PKGS="openai==3.51.0 anthropic==2.10.0"

dirs_of() {
  local out=$1 c s
  for c in $CLIENTS; do
    for s in $(scenarios_of "$c"); do
      [ -f "$out/$c/$s/truth.json" ] && echo "$out/$c/$s"
    done
  done
}

if [ "${1:-}" = --check ]; then
  [ -n "${2:-}" ] || { echo "usage: $0 --check DIR" >&2; exit 2; }
  mapfile -t dirs < <(dirs_of "$2")
  python3 "$HERE/compare.py" --bin "$BIN" --known-failing "$HERE/known-failing.txt" "${dirs[@]}"
  exit $?
fi

install_sdks() {
  local py=$CACHE/pyenv/bin/python
  if [ "$(cat "$CACHE/pyenv/.installed" 2>/dev/null)" = "$PY_PKGS" ] && [ -x "$py" ]; then
    echo "sdks: cached in $CACHE/pyenv"
  else
    mkdir -p "$CACHE"
    rm -rf "$CACHE/pyenv"
    python3 -m venv "$CACHE/pyenv" || return 1
    "$py" -m pip install --quiet --disable-pip-version-check $PY_PKGS >"$CACHE/pip-install.log" 2>&1 \
      || { cat "$CACHE/pip-install.log"; echo "pip install failed"; return 1; }
    echo "$PY_PKGS" >"$CACHE/pyenv/.installed"
  fi
  "$py" -c 'import openai, anthropic; print(f"  openai {openai.__version__}, anthropic {anthropic.__version__}")'
}

install_clients() {
  # the npm clients, at the versions pinned in e2e/agents/run.sh, in the same cache
  local pkgs want have b
  pkgs=$(sed -n 's/^PKGS="\(.*\)"$/\1/p' "$ROOT/e2e/agents/run.sh")
  [ -n "$pkgs" ] || { echo "no PKGS line in e2e/agents/run.sh"; return 1; }
  want=$(printf '%s\n' $pkgs | sort | tr '\n' ' ')
  have=$(cat "$CACHE/.installed" 2>/dev/null || true)
  if [ "$want" = "$have" ] && [ -x "$CACHE/node_modules/.bin/gemini" ] \
    && [ -x "$CACHE/node_modules/.bin/claude" ] && [ -x "$CACHE/node_modules/.bin/codex" ] \
    && [ -x "$CACHE/node_modules/.bin/qwen" ]; then
    echo "clients: cached in $CACHE ($want)"
  else
    mkdir -p "$CACHE"
    echo "clients: npm install --prefix $CACHE $pkgs"
    npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error $pkgs >"$CACHE/npm-install.log" 2>&1 \
      || { cat "$CACHE/npm-install.log"; echo "npm install failed"; return 1; }
    echo "$want" >"$CACHE/.installed"
  fi
}

need_npm=0
for c in $CLIENTS; do case $c in sdk-*) ;; *) need_npm=1 ;; esac; done
if [ $need_npm = 1 ]; then
  install_clients || { echo "0 passed, 1 failed"; exit 1; }
fi
install_sdks || { echo "0 passed, 1 failed"; exit 1; }

if [ -z "${RETRYSCOPE_BIN:-}" ]; then
  cargo build --quiet --bin retryscope || { echo "0 passed, 1 failed"; exit 1; }
fi
[ -x "$BIN" ] || { echo "no retryscope binary at $BIN"; echo "0 passed, 1 failed"; exit 1; }

OUT=${E2E_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/retryscope-e2e-proxy.XXXXXX")}
mkdir -p "$OUT"
echo "sessions into $OUT"
started=$(date +%s)
# clients in parallel, JOBS at a time; scenarios in order within each client
running=0
for c in $CLIENTS; do
  (
    for s in $(scenarios_of "$c"); do
      rm -rf "${OUT:?}/$c/$s"
      python3 "$HERE/session.py" --client "$c" --scenario "$s" --bin "$BIN" \
        --bin-dir "$CACHE/node_modules/.bin" --python "$CACHE/pyenv/bin/python" \
        --out "$OUT/$c/$s" --timeout "$TIMEOUT" || echo "$c $s: session failed"
    done
  ) &
  running=$((running + 1))
  if [ $running -ge "$JOBS" ]; then wait -n; running=$((running - 1)); fi
done
wait
echo "sessions took $(( $(date +%s) - started )) s"
python3 "$HERE/summarize.py" "$OUT" >"$OUT/results.md" 2>/dev/null && echo "table: $OUT/results.md"
mapfile -t dirs < <(dirs_of "$OUT")
python3 "$HERE/compare.py" --bin "$BIN" --known-failing "$HERE/known-failing.txt" "${dirs[@]}"
