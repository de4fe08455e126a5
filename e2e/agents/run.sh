#!/usr/bin/env bash
# End-to-end suite: the four real coding agents (gemini-cli, Claude Code, Codex, Qwen Code), installed
# from npm at pinned versions, run headless against local mocks of their provider APIs that
# cut the first stream (e2e/agents/mock_server.py); then `retryscope check --json` over what
# each client wrote, compared with expectations derived from the run's truth.json.
#
#   e2e/agents/run.sh                 install (cached), run every scenario fresh, check
#   e2e/agents/run.sh --record        same, but write into tests/fixtures/agents/ (refresh)
#   e2e/agents/run.sh --fixtures      no clients: check the committed recordings only
#   e2e/agents/run.sh --record-otlp   record each client's OTLP/JSON telemetry export for the
#                                     clean and after-tool-reset runs into otlp-<scenario>/
#   e2e/agents/run.sh --otlp          the clients export OTLP straight to `retryscope run
#                                     --otlp-listen` / `--otlp-grpc-listen`; /metrics and
#                                     findings compared with the telemetry-file run and the
#                                     truth (e2e/agents/otlp_e2e.py; clean, after-tool-reset)
#   CLIENTS="codex" SCENARIOS="clean after-tool-reset" e2e/agents/run.sh   a subset
#
# Environment: RETRYSCOPE_E2E_CACHE (npm install prefix, default ~/.cache/retryscope-e2e),
# RETRYSCOPE_BIN (default: target/debug/retryscope, built first), E2E_TIMEOUT (seconds per
# client run).
# The last line is `N passed, N failed`. Exit status 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
HERE=$ROOT/e2e/agents
CACHE=${RETRYSCOPE_E2E_CACHE:-$HOME/.cache/retryscope-e2e}
BIN=${RETRYSCOPE_BIN:-$ROOT/target/debug/retryscope}
TIMEOUT=${E2E_TIMEOUT:-90}
MODE=fresh
case "${1:-}" in
  --record) MODE=record ;;
  --fixtures) MODE=fixtures ;;
  --record-otlp) MODE=otlp ;;
  --otlp) MODE=otlp-live ;;
  "") ;;
  *) echo "usage: $0 [--record|--fixtures|--record-otlp|--otlp]" >&2; exit 2 ;;
esac
ALL_CLIENTS="gemini-cli claude-code claude-code-partial codex qwen-code"
ALL_SCENARIOS="clean start-status start-error after-tool-reset after-tool-eof after-tool-error mid-word-reset mid-word-eof mid-word-error before-finish-reset before-finish-eof before-finish-error"
GIVEN_CLIENTS=${CLIENTS:-}
GIVEN_SCENARIOS=${SCENARIOS:-}
CLIENTS=${CLIENTS:-$ALL_CLIENTS}
SCENARIOS=${SCENARIOS:-$ALL_SCENARIOS}

# Pinned versions (issue 10). Changing one means re-recording with --record.
PKGS="@google/gemini-cli@0.61.0 @anthropic-ai/claude-code@2.1.328 @openai/codex@0.169.0 @qwen-code/qwen-code@0.24.4"

install_clients() {
  local want have
  want=$(printf '%s\n' $PKGS | sort | tr '\n' ' ')
  have=$(cat "$CACHE/.installed" 2>/dev/null || true)
  if [ "$want" = "$have" ] && [ -x "$CACHE/node_modules/.bin/gemini" ] \
    && [ -x "$CACHE/node_modules/.bin/claude" ] && [ -x "$CACHE/node_modules/.bin/codex" ] \
    && [ -x "$CACHE/node_modules/.bin/qwen" ]; then
    echo "clients: cached in $CACHE"
  else
    mkdir -p "$CACHE"
    echo "clients: npm install --prefix $CACHE $PKGS"
    npm install --prefix "$CACHE" --no-audit --no-fund --loglevel=error $PKGS >"$CACHE/npm-install.log" 2>&1 \
      || { cat "$CACHE/npm-install.log"; echo "npm install failed"; return 1; }
    echo "$want" >"$CACHE/.installed"
  fi
  local b
  for b in gemini claude codex qwen; do
    printf '  %s: %s\n' "$b" "$(timeout 60 "$CACHE/node_modules/.bin/$b" --version 2>&1 | tail -n 1)"
  done
}

if [ "$MODE" = otlp ]; then
  install_clients || exit 1
  for c in $CLIENTS; do
    [ "$c" = claude-code-partial ] && continue # same telemetry as claude-code
    scen="clean after-tool-reset"
    # the retry after an in-stream error before any content: Codex's restarts the `attempt`
    # counter of codex.api_request at 0, Claude Code's is not exported at all
    case "$c" in codex|claude-code) scen="$scen start-error" ;; esac
    for s in $scen; do
      rm -rf "$ROOT/tests/fixtures/agents/$c/otlp-$s"
      python3 "$HERE/record.py" --client "$c" --scenario "$s" --otlp \
        --bin-dir "$CACHE/node_modules/.bin" --out "$ROOT/tests/fixtures/agents/$c/otlp-$s" \
        --timeout "$TIMEOUT" || echo "$c otlp-$s: recording failed"
    done
  done
  exit 0
fi
if [ "$MODE" = otlp-live ]; then
  install_clients || { echo "0 passed, 1 failed"; exit 1; }
  if [ -z "${RETRYSCOPE_BIN:-}" ]; then
    cargo build --quiet --bin retryscope || { echo "0 passed, 1 failed"; exit 1; }
  fi
  OUT=$(mktemp -d "${TMPDIR:-/tmp}/retryscope-e2e-otlp.XXXXXX")
  echo "recording into $OUT"
  # gemini-cli: a telemetry-file run, then OTLP/HTTP (JSON) and OTLP/gRPC runs, per scenario;
  # Claude Code and Codex: OTLP/HTTP (JSON and protobuf) and OTLP/gRPC. One job per client and
  # scenario, E2E_JOBS (default 6) side by side: they mostly wait on the clients' retries
  # (three jobs kept 0.7 of a core busy, and the longest of them took 170 s).
  clients=$(printf '%s\n' ${GIVEN_CLIENTS:-gemini-cli claude-code codex qwen-code} | grep -v '^claude-code-partial$' | tr '\n' ' ')
  protos=${OTLP_PROTOCOLS:-http,protobuf,grpc}  # each client gets those it supports
  jobs=${E2E_JOBS:-6}
  logs=()
  running=0
  for c in $clients; do
    s=${GIVEN_SCENARIOS:-clean after-tool-reset}
    # Claude Code and Codex runs take seconds: also the retry before any content
    case "$c" in claude-code|codex) [ -z "$GIVEN_SCENARIOS" ] && s="$s start-error" ;; esac
    for one in $s; do
      log="$OUT/otlp-e2e-$c-$one.log"
      # its status in a file: `wait -n` below reaps jobs before the final wait could
      ( python3 "$HERE/otlp_e2e.py" --bin "$BIN" --bin-dir "$CACHE/node_modules/.bin" --out "$OUT" \
          --clients "$c" --scenarios "$one" --protocols "$protos" --timeout "$TIMEOUT" >"$log" 2>&1
        echo $? >"$log.rc" ) &
      logs+=("$log")
      running=$((running + 1))
      if [ "$running" -ge "$jobs" ]; then wait -n; running=$((running - 1)); fi
    done
  done
  wait
  rc=0
  passed=0
  failed=0
  for l in "${logs[@]}"; do
    [ "$(cat "$l.rc" 2>/dev/null)" = 0 ] || rc=1
    grep -v -E '^[0-9]+ passed, [0-9]+ failed$' "$l"
    last=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$l" | tail -n 1)
    if [ -z "$last" ]; then failed=$((failed + 1)); echo "FAIL $l: no result line"; continue; fi
    passed=$((passed + ${last%% passed*}))
    f=${last#*, }
    failed=$((failed + ${f%% failed}))
  done
  echo "$passed passed, $failed failed"
  [ "$failed" -eq 0 ] && [ "$rc" -eq 0 ]
  exit $?
fi
if [ "$MODE" = fixtures ]; then
  OUT=$ROOT/tests/fixtures/agents
else
  install_clients || { echo "0 passed, 1 failed"; exit 1; }
  if [ "$MODE" = record ]; then
    OUT=$ROOT/tests/fixtures/agents
  else
    OUT=$(mktemp -d "${TMPDIR:-/tmp}/retryscope-e2e-agents.XXXXXX")
  fi
  echo "recording into $OUT"
  # background jobs per client (they are independent), scenarios in order within each; the
  # slow starters (gemini-cli, Qwen Code: 120-140 s for twelve scenarios, twice the others)
  # as two jobs, odd and even scenarios, so that they do not set the suite's length alone
  pids=()
  for c in $CLIENTS; do
    case "$c" in gemini-cli|qwen-code) halves="0 1" ;; *) halves="all" ;; esac
    for half in $halves; do
      (
        i=0
        for s in $SCENARIOS; do
          i=$((i + 1))
          [ "$half" = all ] || [ $((i % 2)) = "$half" ] || continue
          rm -rf "${OUT:?}/$c/$s"
          python3 "$HERE/record.py" --client "$c" --scenario "$s" \
            --bin-dir "$CACHE/node_modules/.bin" --out "$OUT/$c/$s" --timeout "$TIMEOUT" \
            || echo "$c $s: recording failed"
        done
      ) &
      pids+=($!)
    done
  done
  for p in "${pids[@]}"; do wait "$p"; done
fi

if [ -z "${RETRYSCOPE_BIN:-}" ]; then
  # the default binary is built from this tree (a no-op when it is up to date)
  cargo build --quiet --bin retryscope || { echo "0 passed, 1 failed"; exit 1; }
fi
[ -x "$BIN" ] || { echo "no retryscope binary at $BIN"; echo "0 passed, 1 failed"; exit 1; }
args=()
for c in $CLIENTS; do
  for s in $SCENARIOS; do
    [ -f "$OUT/$c/$s/truth.json" ] && args+=("$OUT/$c/$s")
  done
done
python3 "$HERE/expect.py" --bin "$BIN" "${args[@]}"
