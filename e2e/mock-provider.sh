#!/usr/bin/env bash
# A local mock of a model provider on a fixed port, to try retryscope's routes without a
# provider account: the scripted tool-calling turn of e2e/agents/mock_server.py (text, one
# shell call that touches a marker file, more text, the finish event; then a final answer).
#
#   e2e/mock-provider.sh anthropic                 # Anthropic Messages on 127.0.0.1:8790
#   e2e/mock-provider.sh openai-chat 8791          # OpenAI Chat Completions (Qwen Code, SDKs)
#   e2e/mock-provider.sh openai 8792               # OpenAI Responses (Codex)
#   e2e/mock-provider.sh gemini 8793               # Gemini (gemini-cli)
#   SCENARIO=after-tool-reset e2e/mock-provider.sh anthropic   # the mock cuts attempt 1 itself
#
# SCENARIO=clean (default) never cuts: put `retryscope proxy --inject …` in front to cut.
# Marker files and the request log go to MOCK_DIR (default a fresh temporary folder).
# Loopback only; Python 3, standard library only. Ctrl-C stops it.
set -euo pipefail
provider=${1:?usage: $0 anthropic|openai|openai-chat|gemini [PORT]}
port=${2:-8790}
here=$(cd "$(dirname "$0")" && pwd)
dir=${MOCK_DIR:-$(mktemp -d)}
mkdir -p "$dir"
base="http://127.0.0.1:$port"
case $provider in
  anthropic) echo "point clients at it: ANTHROPIC_BASE_URL=$base ANTHROPIC_API_KEY=mock" ;;
  openai-chat) echo "point clients at it: OPENAI_BASE_URL=$base/v1 OPENAI_API_KEY=mock" ;;
  openai) echo "point clients at it: OPENAI_BASE_URL=$base/v1 (Codex: base_url = \"$base/v1\" in ~/.codex/config.toml)" ;;
  gemini) echo "point clients at it: GOOGLE_GEMINI_BASE_URL=$base GEMINI_API_KEY=mock" ;;
esac
echo "markers and request log: $dir"
exec python3 "$here/agents/mock_server.py" --provider "$provider" --scenario "${SCENARIO:-clean}" \
  --marker-dir "$dir/markers" --log "$dir/requests.jsonl" --port "$port"
