#!/usr/bin/env bash
# A newcomer's first hour, in CI: from the built binary, the README's commands and each
# docs/clients/*.md recipe, run against the local mock providers (e2e/mock-provider.sh), and
# each must give the finding its doc promises. The real clients are the ones
# e2e/agents/run.sh installs (gemini-cli, Claude Code, Codex in $RETRYSCOPE_E2E_CACHE); a
# client that is not installed is skipped and said so.
#
#   bash e2e/first-hour.sh            # after `cargo build`; about 1-2 minutes
#
# Environment: RETRYSCOPE_BIN (default target/debug/retryscope), RETRYSCOPE_E2E_CACHE
# (default ~/.cache/retryscope-e2e), FIRST_HOUR_PORT (first of the fixed ports used, default
# 18790). The last line is `first hour: N passed, N failed`; exit 1 if anything failed.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BIN=${RETRYSCOPE_BIN:-$ROOT/target/debug/retryscope}
CACHE=${RETRYSCOPE_E2E_CACHE:-$HOME/.cache/retryscope-e2e}
CLIENTS_BIN=$CACHE/node_modules/.bin
PORT0=${FIRST_HOUR_PORT:-18790}
PROMPT="Create the marker file."
work=$(mktemp -d)
pids=()
passed=0
failed=0
started=$(date +%s)

cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  rm -rf "$work"
}
trap cleanup EXIT

ok() { passed=$((passed + 1)); echo "  ok: $*"; }
bad() { failed=$((failed + 1)); echo "  FAILED: $*"; }
# expect NAME FILE WORD...: every WORD appears in FILE.
expect() {
  local name=$1 file=$2 w
  shift 2
  for w in "$@"; do
    grep -q -- "$w" "$file" || { bad "$name: no '$w' in $(basename "$file")"; sed -n 1,20p "$file"; return; }
  done
  ok "$name"
}
wait_port() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
stop() { kill "$1" 2>/dev/null; wait "$1" 2>/dev/null; }

# A mock provider on a fixed port, as docs/clients/README.md starts it.
# Sets m to its pid.
mock() { # provider port scenario dir
  MOCK_DIR=$4 SCENARIO=$3 bash e2e/mock-provider.sh "$1" "$2" >"$4.mock.log" 2>&1 &
  m=$!
  pids+=("$m")
  wait_port "$2" || { echo "mock $1 did not start"; cat "$4.mock.log"; }
}

echo "== README: the two commands =="
"$BIN" run --demo --metrics-addr 127.0.0.1:$PORT0 >"$work/demo.out" 2>"$work/demo.err" &
demo=$!
pids+=("$demo")
for _ in $(seq 150); do grep -q '"kind"' "$work/demo.out" 2>/dev/null && break; sleep 0.1; done
curl -sf -o "$work/metrics.txt" "http://127.0.0.1:$PORT0/metrics"
curl -sf -o "$work/ui.html" "http://127.0.0.1:$PORT0/ui"
stop "$demo"
expect "run --demo: findings as JSON lines on a pipe" "$work/demo.out" '"kind":' '"severity":'
expect "run --demo: /metrics" "$work/metrics.txt" 'retryscope_turns_total' 'retryscope_findings_total'
expect "run --demo: the live page at /ui" "$work/ui.html" '<h1>retryscope live</h1>'

echo "== README: checking a recorded log =="
"$BIN" check --color never examples/bookstore/naive.jsonl >"$work/naive.txt" 2>&1
expect "check examples/bookstore/naive.jsonl" "$work/naive.txt" \
  'CRITICAL abandoned_tool_executed' 'from examples/bookstore/naive.jsonl:1'
"$BIN" check --html "$work/report.html" examples/ >/dev/null 2>&1 \
  && [ -s "$work/report.html" ] && ok "check --html report.html examples/" || bad "check --html"
"$BIN" check --json examples/bookstore/ | tail -n 1 >"$work/summary.json"
expect "check --json examples/bookstore/" "$work/summary.json" '"summary"' '"abandoned_tool_executed":2'
"$BIN" check --fail-on critical examples/bookstore/naive.jsonl >/dev/null 2>&1
[ $? = 1 ] && ok "check --fail-on critical: exit 1" || bad "check --fail-on critical did not exit 1"
"$BIN" check README.md >/dev/null 2>"$work/readme.err"
[ $? = 2 ] && ok "check README.md: refused (exit 2)" || bad "check README.md was read as a log"

if [ ! -x "$CLIENTS_BIN/claude" ] && [ ! -x "$CLIENTS_BIN/gemini" ] && [ ! -x "$CLIENTS_BIN/codex" ]; then
  echo "== docs/clients: no client installed in $CLIENTS_BIN (e2e/agents/run.sh installs them): skipped =="
fi

# A client run with a fresh HOME and work folder; only loopback addresses are configured.
client() { # name outfile env... -- argv...
  local name=$1 out=$2
  shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  (cd "$work/$name.cwd" && env -i PATH="$CLIENTS_BIN:$PATH" HOME="$work/$name.home" NO_COLOR=1 \
    "${envs[@]}" timeout 120 "$@" >"$out" 2>"$work/$name.stderr" </dev/null) || true
}
setup() { mkdir -p "$work/$1.home" "$work/$1.cwd"; }

# The proxy in front of a clean mock, cutting the first stream after its tool call; sets px.
proxy() { # upstream_port proxy_port metrics_port findings
  "$BIN" proxy --upstream "http://127.0.0.1:$1" --listen "127.0.0.1:$2" --metrics-addr "127.0.0.1:$3" \
    --inject after-tool-call --inject-how reset --findings-out "$4" >/dev/null 2>"$4.err" &
  px=$!
  pids+=("$px")
  wait_port "$2" || { echo "the proxy did not start"; cat "$4.err"; }
}

if [ -x "$CLIENTS_BIN/claude" ]; then
  echo "== docs/clients/claude-code.md =="
  p=$((PORT0 + 1))
  mock anthropic $p after-tool-reset "$work/claude-mock"
  setup claude
  client claude "$work/claude.jsonl" ANTHROPIC_BASE_URL=http://127.0.0.1:$p ANTHROPIC_API_KEY=mock \
    CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 -- \
    claude -p "$PROMPT" --output-format stream-json --verbose --include-partial-messages --allowedTools Bash
  stop "$m"
  "$BIN" check --color never "$work/claude.jsonl" >"$work/claude.txt" 2>&1
  expect "claude-code.md: headless stream-json, check" "$work/claude.txt" 'unfinished_tool_executed'
  # Through the proxy (docs/clients/README.md's recipe).
  mock anthropic $p clean "$work/claude-mock2"
  proxy $p $((PORT0 + 2)) $((PORT0 + 3)) "$work/claude-proxy.jsonl"
  setup claude-px
  client claude-px "$work/claude-px.jsonl" ANTHROPIC_BASE_URL=http://127.0.0.1:$((PORT0 + 2)) \
    ANTHROPIC_API_KEY=mock CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 -- \
    claude -p "$PROMPT" --output-format stream-json --verbose --allowedTools Bash
  stop "$px"; stop "$m"
  expect "claude-code.md: through the proxy (ANTHROPIC_BASE_URL)" "$work/claude-proxy.jsonl" 'unfinished_tool_executed'
fi

if [ -x "$CLIENTS_BIN/gemini" ]; then
  echo "== docs/clients/gemini-cli.md =="
  p=$((PORT0 + 4))
  mock gemini $p after-tool-reset "$work/gemini-mock"
  setup gemini
  mkdir -p "$work/gemini.home/.gemini"
  cat >"$work/gemini.home/.gemini/settings.json" <<EOF
{"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}},
 "telemetry": {"enabled": true, "target": "local", "outfile": "$work/gemini-telemetry.log", "logPrompts": true}}
EOF
  client gemini "$work/gemini-session-1.jsonl" GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:$p GEMINI_API_KEY=mock -- \
    gemini -p "$PROMPT" -o stream-json --yolo
  stop "$m"
  "$BIN" check --color never "$work/gemini-telemetry.log" "$work"/gemini-session-*.jsonl >"$work/gemini.txt" 2>&1
  expect "gemini-cli.md: telemetry outfile and stream-json, check" "$work/gemini.txt" \
    'abandoned_tool_executed' 'unfinished_tool_executed' 'spliced_text'
  "$BIN" check --require-coverage "$work"/gemini-session-*.jsonl >"$work/gemini-alone.txt" 2>&1
  [ $? = 1 ] && grep -q 'blind spot: gemini-cli-stream-json cannot show attempts, cuts' "$work/gemini-alone.txt" \
    && ok "gemini-cli.md: stream-json alone says it cannot show cuts (--require-coverage exits 1)" \
    || bad "gemini-cli.md: stream-json alone passed --require-coverage"
  mock gemini $p clean "$work/gemini-mock2"
  proxy $p $((PORT0 + 5)) $((PORT0 + 6)) "$work/gemini-proxy.jsonl"
  setup gemini-px
  mkdir -p "$work/gemini-px.home/.gemini"
  echo '{"security": {"auth": {"selectedType": "gemini-api-key"}, "folderTrust": {"enabled": false}}}' \
    >"$work/gemini-px.home/.gemini/settings.json"
  client gemini-px "$work/gemini-px.jsonl" GOOGLE_GEMINI_BASE_URL=http://127.0.0.1:$((PORT0 + 5)) GEMINI_API_KEY=mock -- \
    gemini -p "$PROMPT" -o stream-json --yolo
  stop "$px"; stop "$m"
  expect "gemini-cli.md: through the proxy (GOOGLE_GEMINI_BASE_URL)" "$work/gemini-proxy.jsonl" 'unfinished_tool_executed'
fi

if [ -x "$CLIENTS_BIN/codex" ]; then
  echo "== docs/clients/codex.md =="
  codex_config() { # home base_url
    mkdir -p "$1/.codex"
    cat >"$1/.codex/config.toml" <<EOF
model = "gpt-5-codex"
model_provider = "mine"

[model_providers.mine]
name = "mine"
base_url = "$2"
env_key = "MY_API_KEY"
wire_api = "responses"
supports_websockets = false
EOF
  }
  p=$((PORT0 + 7))
  mock openai $p after-tool-reset "$work/codex-mock"
  setup codex
  codex_config "$work/codex.home" "http://127.0.0.1:$p/v1"
  client codex "$work/codex-1.jsonl" MY_API_KEY=mock -- \
    codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$PROMPT"
  stop "$m"
  "$BIN" check --color never "$work"/codex-*.jsonl >"$work/codex.txt" 2>&1
  expect "codex.md: exec --json, check" "$work/codex.txt" 'unfinished_tool_executed'
  mock openai $p clean "$work/codex-mock2"
  proxy $p $((PORT0 + 8)) $((PORT0 + 9)) "$work/codex-proxy.jsonl"
  setup codex-px
  codex_config "$work/codex-px.home" "http://127.0.0.1:$((PORT0 + 8))/v1"
  client codex-px "$work/codex-px.out" MY_API_KEY=mock -- \
    codex exec --json --skip-git-repo-check --dangerously-bypass-approvals-and-sandbox "$PROMPT"
  stop "$px"; stop "$m"
  expect "codex.md: through the proxy (base_url in config.toml)" "$work/codex-proxy.jsonl" 'unfinished_tool_executed'
fi

echo "first hour: $passed passed, $failed failed ($(( $(date +%s) - started )) s)"
[ "$failed" = 0 ]
