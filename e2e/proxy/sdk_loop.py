#!/usr/bin/env python3
"""A small agent tool loop on an official Python SDK, written the way the SDKs' own docs
write one: stream a turn with the SDK's streaming helper, print text as it arrives, take the
final message from the helper, run its tool calls, send the results back, until the model
answers without a tool call. A stream that breaks (connection error, an in-stream error
event, a stream the helper cannot finish) is retried from the same request, up to 3 times.

  sdk_loop.py --api anthropic|openai-chat|openai-responses --base-url URL [--transcript FILE]
              [--tool-seconds S]

APIs and the documented pattern each follows:
  anthropic         `client.messages.stream(...)`, `text_stream`, `get_final_message()`;
                    tools run while `stop_reason == "tool_use"` (the Messages tool-use loop)
  openai-chat       `client.chat.completions.stream(...)`, `content.delta` events,
                    `get_final_completion()`; tools run for `message.tool_calls`
  openai-responses  `client.responses.stream(...)`, `response.output_text.delta` events,
                    `get_final_response()` (raises when `response.completed` never came);
                    `function_call` items run, `input += response.output` then
                    `function_call_output` items

The one tool, `Bash` (anthropic) / `shell_command` (openai), runs its `command` with
`bash -c`: the local mock upstream asks it to `touch` a marker file named for the attempt and
call id, which is the ground truth of what ran. The SDK's own `max_retries` stays at its
default (it retries failed requests before a stream starts; a stream that breaks later is
this loop's business, as in real agents).

--tool-seconds makes every tool run take S seconds more (a build or a test suite that runs
longer than the proxy's idle timeout; e2e/proxy's `slow-tool` scenario).

The transcript (JSON lines: attempt starts, text deltas, errors, tool runs, results sent) is
written to --transcript; it is for reading a failure, not for the comparison.
"""

import argparse
import json
import subprocess
import sys
import time
import warnings

warnings.simplefilter("ignore", DeprecationWarning)  # the SDKs warn about model names

PROMPT = "Create the marker file."
MAX_TRIES = 3
MAX_STEPS = 4


class Log:
    def __init__(self, path):
        self.f = open(path, "a", encoding="utf-8") if path else None

    def __call__(self, kind, **kw):
        rec = dict(kind=kind, ts_ms=int(time.time() * 1000), **kw)
        if self.f:
            self.f.write(json.dumps(rec) + "\n")
            self.f.flush()


TOOL_SECONDS = 0.0


def run_tool(command, log, call_id):
    time.sleep(TOOL_SECONDS)
    p = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=30)
    log("tool_run", call_id=call_id, command=command, exit=p.returncode)
    return (p.stdout + p.stderr) or f"exit {p.returncode}"


def with_retries(log, step, once):
    """Runs one streamed request; retries it from scratch when the stream breaks."""
    for attempt in range(1, MAX_TRIES + 1):
        log("attempt", step=step, attempt=attempt)
        try:
            return once()
        except Exception as e:  # noqa: BLE001: any broken stream is retried, as agents do
            log("stream_error", step=step, attempt=attempt, error=type(e).__name__,
                message=str(e)[:300])
            time.sleep(0.2)
    raise SystemExit(f"step {step}: gave up after {MAX_TRIES} tries")


def loop_anthropic(base_url, log):
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-mock")
    tools = [{"name": "Bash", "description": "Run a shell command.",
              "input_schema": {"type": "object", "properties": {"command": {"type": "string"}},
                               "required": ["command"]}}]
    messages = [{"role": "user", "content": PROMPT}]
    for step in range(1, MAX_STEPS + 1):
        def once():
            with client.messages.stream(model="claude-sonnet-4-5", max_tokens=1024,
                                        messages=messages, tools=tools) as stream:
                for text in stream.text_stream:
                    log("text", text=text)
                return stream.get_final_message()

        message = with_retries(log, step, once)
        log("final", step=step, stop_reason=message.stop_reason, id=message.id)
        messages.append({"role": "assistant", "content": message.content})
        if message.stop_reason != "tool_use":
            return 0
        results = []
        for block in message.content:
            if block.type == "tool_use":
                out = run_tool(block.input.get("command", ""), log, block.id)
                results.append({"type": "tool_result", "tool_use_id": block.id, "content": out})
        log("results_sent", step=step, ids=[r["tool_use_id"] for r in results])
        messages.append({"role": "user", "content": results})
    return 0


def _openai_client(base_url):
    import openai

    return openai.OpenAI(base_url=base_url, api_key="sk-mock")


def loop_openai_chat(base_url, log):
    client = _openai_client(base_url)
    tools = [{"type": "function", "function": {
        "name": "shell_command", "description": "Run a shell command.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                       "required": ["command"]}}}]
    messages = [{"role": "user", "content": PROMPT}]
    for step in range(1, MAX_STEPS + 1):
        def once():
            with client.chat.completions.stream(model="gpt-4o", messages=messages, tools=tools,
                                                stream_options={"include_usage": True}) as stream:
                for event in stream:
                    if event.type == "content.delta":
                        log("text", text=event.delta)
                return stream.get_final_completion()

        completion = with_retries(log, step, once)
        choice = completion.choices[0]
        msg = choice.message
        log("final", step=step, finish_reason=choice.finish_reason, id=completion.id)
        messages.append(msg.model_dump(exclude_none=True, exclude={"parsed"}))
        if not msg.tool_calls:
            return 0
        ids = []
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments or "{}")
            out = run_tool(args.get("command", ""), log, call.id)
            messages.append({"role": "tool", "tool_call_id": call.id, "content": out})
            ids.append(call.id)
        log("results_sent", step=step, ids=ids)
    return 0


def loop_openai_responses(base_url, log):
    client = _openai_client(base_url)
    tools = [{"type": "function", "name": "shell_command", "description": "Run a shell command.",
              "parameters": {"type": "object", "properties": {"command": {"type": "string"}},
                             "required": ["command"]}}]
    inputs = [{"role": "user", "content": PROMPT}]
    for step in range(1, MAX_STEPS + 1):
        def once():
            with client.responses.stream(model="gpt-5", input=inputs, tools=tools) as stream:
                for event in stream:
                    if event.type == "response.output_text.delta":
                        log("text", text=event.delta)
                return stream.get_final_response()

        response = with_retries(log, step, once)
        log("final", step=step, status=response.status, id=response.id)
        inputs += [item.model_dump(exclude_none=True) for item in response.output]
        calls = [item for item in response.output if item.type == "function_call"]
        if not calls:
            return 0
        for call in calls:
            args = json.loads(call.arguments or "{}")
            out = run_tool(args.get("command", ""), log, call.call_id)
            inputs.append({"type": "function_call_output", "call_id": call.call_id, "output": out})
        log("results_sent", step=step, ids=[c.call_id for c in calls])
    return 0


LOOPS = {"anthropic": loop_anthropic, "openai-chat": loop_openai_chat,
         "openai-responses": loop_openai_responses}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--api", required=True, choices=sorted(LOOPS))
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--transcript")
    ap.add_argument("--tool-seconds", type=float, default=0.0)
    a = ap.parse_args()
    global TOOL_SECONDS
    TOOL_SECONDS = a.tool_seconds
    log = Log(a.transcript)
    return LOOPS[a.api](a.base_url, log)


if __name__ == "__main__":
    sys.exit(main())
