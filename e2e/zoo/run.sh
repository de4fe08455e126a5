#!/usr/bin/env bash
# The strategy zoo (issue 21, item 3): e2e/zoo/zoo_client.py, on the official `anthropic` and
# `openai` Python SDKs, retries a cut stream with one strategy per run (identical resend,
# changed ids/headers/sampling, continuation by prefill with and without a "continue"
# message, fallback model, non-streamed fallback, Responses `previous_response_id`, background
# stream resume); `retryscope proxy --inject <point> --inject-how reset` cuts the first stream
# in front of the non-cutting mock. Every strategy x cut point is checked against the truth
# (the mock's request log, the marker files) twice: the proxy's /metrics, and `retryscope
# check` over the client's own native log (e2e/zoo/zoo.py).
#
#   e2e/zoo/run.sh                                  everything (54 sessions, about 2.5 minutes)
#   ONLY="anthropic/prefill openai-responses/background-resume/mid-word" e2e/zoo/run.sh
#   e2e/zoo/run.sh --check DIR                      compare a kept run again
#
# Environment: RETRYSCOPE_E2E_CACHE (the Python venv, shared with e2e/proxy/run.sh, default
# ~/.cache/retryscope-e2e), RETRYSCOPE_BIN (default target/debug/retryscope, built first),
# E2E_OUT (keep the run's folders there), E2E_JOBS (sessions in parallel, default 6).
# Checks listed in e2e/zoo/known-failing.txt print KNOWN and are not counted.
# The last line is `N passed, N failed`. Exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/e2e/zoo
CACHE=${RETRYSCOPE_E2E_CACHE:-$HOME/.cache/retryscope-e2e}
BIN=${RETRYSCOPE_BIN:-$ROOT/target/debug/retryscope}
PY=$CACHE/pyenv/bin/python
# the SDK venv is e2e/proxy/run.sh's (PY_PKGS there pins openai and anthropic)
want=$(sed -n 's/^PY_PKGS="\(.*\)"$/\1/p' "$ROOT/e2e/proxy/run.sh")
if [ "$(cat "$CACHE/pyenv/.installed" 2>/dev/null)" != "$want" ] || [ ! -x "$PY" ]; then
  mkdir -p "$CACHE"
  rm -rf "$CACHE/pyenv"
  python3 -m venv "$CACHE/pyenv" \
    && "$PY" -m pip install --quiet --disable-pip-version-check $want >"$CACHE/pip-install.log" 2>&1 \
    && echo "$want" >"$CACHE/pyenv/.installed" \
    || { cat "$CACHE/pip-install.log" 2>/dev/null; echo "0 passed, 1 failed"; exit 1; }
fi
if [ -z "${RETRYSCOPE_BIN:-}" ]; then
  cargo build --quiet --bin retryscope || { echo "0 passed, 1 failed"; exit 1; }
fi
[ -x "$BIN" ] || { echo "no retryscope binary at $BIN"; echo "0 passed, 1 failed"; exit 1; }
args=(--bin "$BIN" --python "$PY" --known-failing "$HERE/known-failing.txt" --jobs "${E2E_JOBS:-6}")
if [ "${1:-}" = --check ]; then
  [ -n "${2:-}" ] || { echo "usage: $0 --check DIR" >&2; exit 2; }
  args+=(--out "$2" --check-only)
else
  OUT=${E2E_OUT:-$(mktemp -d "${TMPDIR:-/tmp}/retryscope-e2e-zoo.XXXXXX")}
  echo "sessions into $OUT"
  args+=(--out "$OUT")
fi
# shellcheck disable=SC2086
[ -n "${ONLY:-}" ] && args+=(--only $ONLY)
"$PY" "$HERE/zoo.py" "${args[@]}"
