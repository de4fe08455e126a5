#!/usr/bin/env python3
"""The strategy zoo's test client: one small agent tool loop on the official `anthropic` and
`openai` Python SDKs that, when a streamed model call breaks, retries it with ONE strategy
chosen by a flag, and writes its own native event log (docs/event-format.md) of what it did.

  zoo_client.py --api anthropic|openai-chat|openai-responses --strategy S --base-url URL \
                --log native.jsonl [--transcript t.jsonl]

Strategies (STRATEGIES below says which APIs have which):
  resend            the identical request again
  resend-changed    the same history with a new `Idempotency-Key` / `X-Zoo-Retry` header and
                    another temperature
  prefill           continuation: the history plus the cut attempt's partial text as a
                    trailing assistant message (Anthropic assistant prefill; a trailing
                    assistant message in Chat Completions)
  prefill-continue  the same, then a user message asking to continue after that text
  fallback-model    the same history to another model
  non-stream        the same history with `stream: false` (a whole JSON answer)
  previous-response-id  (Responses) the conversation by reference: `previous_response_id` set
                    to the cut response and a user message asking to continue; later calls
                    send only new items with `previous_response_id` of the last response
  background-resume (Responses) the request is a background response (`background: true`);
                    after a break the SAME attempt's stream is resumed with
                    `responses.retrieve(id, stream=True, starting_after=<last sequence
                    number>)` (`GET /v1/responses/{id}?stream=true&starting_after=N`)

What the client keeps (shows, and sends back in later history): the final attempt's text,
except for continuations, which keep the partial text followed by what the continuation
added, and a resumed background stream, which is one attempt. It runs the tool calls of the
message it kept (the one tool, `Bash` / `shell_command`, runs `bash -c`: the mock asks it to
`touch` a marker file named for the attempt and call id).

The native log: one turn per model call (`zoo-<api>-<strategy>#<step>`), `attempt_start`,
`text`, `tool_call`, `finish` / `error` per attempt, `retry` (reason: the strategy) before
each new attempt, `render_reset` when the client discards partial text, `tool_exec` for
each call run (its attempt: the one that produced the call), `output` (the kept text), and
`turn_end`. SDK retries are off (`max_retries=0`): the strategy is the only retry.
"""

import argparse
import json
import os
import sys
import time
import uuid
import warnings

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "proxy"))
from sdk_loop import PROMPT, Log, run_tool  # noqa: E402  (the proxy suite's tool loop pieces)

warnings.simplefilter("ignore", DeprecationWarning)

MAX_TRIES = 3
MAX_STEPS = 4
CONTINUE = "Continue exactly where your previous answer stopped; do not repeat it."
MODELS = {"anthropic": ("claude-sonnet-4-5", "claude-haiku-4-5"),
          "openai-chat": ("gpt-4o", "gpt-4o-mini"),
          "openai-responses": ("gpt-5", "gpt-5-mini")}
COMMON = ["resend", "resend-changed", "fallback-model", "non-stream"]
STRATEGIES = {"anthropic": COMMON + ["prefill", "prefill-continue"],
              "openai-chat": COMMON + ["prefill", "prefill-continue"],
              "openai-responses": COMMON + ["previous-response-id", "background-resume"]}
CONTINUATIONS = ("prefill", "prefill-continue", "previous-response-id")
TOOL_SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}},
               "required": ["command"]}


class Native:
    """The client's own log in retryscope's native format (docs/event-format.md)."""

    def __init__(self, path, conversation):
        self.f = open(path, "a", encoding="utf-8")
        self.conversation = conversation

    def __call__(self, step, kind, **kw):
        rec = {"turn": f"{self.conversation}#{step}", "type": kind,
               "ts": int(time.time() * 1000)}
        rec.update({k: v for k, v in kw.items() if v is not None})
        self.f.write(json.dumps(rec) + "\n")
        self.f.flush()


class Result:
    """One attempt as the client received it."""

    def __init__(self):
        self.text = ""
        self.calls = []  # [{"id", "name", "args" (dict)}], complete calls only
        self.finish = None  # the finish reason, None when the stream broke
        self.error = None
        self.response_id = None
        self.last_seq = None  # Responses: the last sequence number received
        self.output_items = None  # Responses: the completed response's output items
        self.usage = None


# ---- one attempt per API: stream (or not), collect, log as it arrives ------------------------

def attempt_anthropic(client, req, stream, on_text, r):
    if not stream:
        m = client.messages.create(stream=False, **req)
        for b in m.content:
            if b.type == "text":
                on_text(r, b.text)
            elif b.type == "tool_use":
                r.calls.append({"id": b.id, "name": b.name, "args": dict(b.input)})
        r.finish, r.response_id = m.stop_reason, m.id
        r.usage = (m.usage.input_tokens, m.usage.output_tokens)
        return
    blocks = {}
    for ev in client.messages.create(stream=True, **req):
        if ev.type == "message_start":
            r.response_id = ev.message.id
            r.usage = (ev.message.usage.input_tokens, ev.message.usage.output_tokens)
        elif ev.type == "content_block_start" and ev.content_block.type == "tool_use":
            blocks[ev.index] = {"id": ev.content_block.id, "name": ev.content_block.name, "json": ""}
        elif ev.type == "content_block_delta" and ev.delta.type == "text_delta":
            on_text(r, ev.delta.text)
        elif ev.type == "content_block_delta" and ev.delta.type == "input_json_delta":
            blocks[ev.index]["json"] += ev.delta.partial_json
        elif ev.type == "content_block_stop" and ev.index in blocks:
            b = blocks.pop(ev.index)
            r.calls.append({"id": b["id"], "name": b["name"], "args": json.loads(b["json"] or "{}")})
        elif ev.type == "message_delta":
            r.finish = ev.delta.stop_reason
            r.usage = (r.usage[0] if r.usage else None, ev.usage.output_tokens)


def attempt_chat(client, req, stream, on_text, r):
    if not stream:
        c = client.chat.completions.create(stream=False, **req)
        ch = c.choices[0]
        if ch.message.content:
            on_text(r, ch.message.content)
        for tc in ch.message.tool_calls or []:
            r.calls.append({"id": tc.id, "name": tc.function.name,
                            "args": json.loads(tc.function.arguments or "{}")})
        r.finish, r.response_id = ch.finish_reason, c.id
        return
    calls = {}
    finish = None
    for chunk in client.chat.completions.create(stream=True, stream_options={"include_usage": True},
                                                **req):
        r.response_id = chunk.id
        for ch in chunk.choices:
            if ch.delta.content:
                on_text(r, ch.delta.content)
            for tc in ch.delta.tool_calls or []:
                c = calls.setdefault(tc.index, {"id": None, "name": None, "json": ""})
                c["id"] = tc.id or c["id"]
                c["name"] = (tc.function and tc.function.name) or c["name"]
                c["json"] += (tc.function and tc.function.arguments) or ""
            if ch.finish_reason:
                finish = ch.finish_reason
        if chunk.usage:
            r.usage = (chunk.usage.prompt_tokens, chunk.usage.completion_tokens)
    # a Chat Completions call is complete only with its finish reason
    if finish:
        r.calls = [{"id": c["id"], "name": c["name"], "args": json.loads(c["json"] or "{}")}
                   for _, c in sorted(calls.items())]
    r.finish = finish


def responses_events(r, events, on_text):
    for ev in events:
        r.last_seq = getattr(ev, "sequence_number", r.last_seq)
        if ev.type in ("response.created", "response.queued", "response.in_progress"):
            r.response_id = ev.response.id
        elif ev.type == "response.output_text.delta":
            on_text(r, ev.delta)
        elif ev.type == "response.output_item.done" and ev.item.type == "function_call":
            r.calls.append({"id": ev.item.call_id, "name": ev.item.name,
                            "args": json.loads(ev.item.arguments or "{}")})
        elif ev.type == "response.completed":
            r.finish = "completed"
            r.output_items = [i.model_dump(exclude_none=True) for i in ev.response.output]
            u = ev.response.usage
            r.usage = (u.input_tokens, u.output_tokens) if u else None
        elif ev.type in ("response.failed", "error"):
            r.error = ev.type


def attempt_responses(client, req, stream, on_text, r):
    if not stream:
        resp = client.responses.create(stream=False, **req)
        for item in resp.output:
            if item.type == "message":
                for part in item.content:
                    if part.type == "output_text":
                        on_text(r, part.text)
            elif item.type == "function_call":
                r.calls.append({"id": item.call_id, "name": item.name,
                                "args": json.loads(item.arguments or "{}")})
        r.response_id = resp.id
        r.finish = "completed" if resp.status == "completed" else None
        r.output_items = [i.model_dump(exclude_none=True) for i in resp.output]
        return
    responses_events(r, client.responses.create(stream=True, **req), on_text)


def resume_responses(client, r, on_text):
    """Background resume: the same attempt's stream after the last sequence number seen."""
    events = client.responses.retrieve(r.response_id, stream=True,
                                       starting_after=r.last_seq if r.last_seq is not None else -1)
    responses_events(r, events, on_text)


ATTEMPT = {"anthropic": attempt_anthropic, "openai-chat": attempt_chat,
           "openai-responses": attempt_responses}


# ---- requests per API -----------------------------------------------------------------------

def first_request(api, strategy):
    model = MODELS[api][0]
    if api == "anthropic":
        req = {"model": model, "max_tokens": 1024,
               "messages": [{"role": "user", "content": PROMPT}],
               "tools": [{"name": "Bash", "description": "Run a shell command.",
                          "input_schema": TOOL_SCHEMA}]}
    elif api == "openai-chat":
        req = {"model": model, "messages": [{"role": "user", "content": PROMPT}],
               "tools": [{"type": "function", "function": {
                   "name": "shell_command", "description": "Run a shell command.",
                   "parameters": TOOL_SCHEMA}}]}
    else:
        req = {"model": model, "input": [{"role": "user", "content": PROMPT}],
               "tools": [{"type": "function", "name": "shell_command",
                          "description": "Run a shell command.", "parameters": TOOL_SCHEMA}]}
        if strategy == "background-resume":
            req.update(background=True, store=True)
    if strategy == "resend-changed":
        # Anthropic's SDK 2.10 (the API it speaks) has no sampling parameters left; its
        # retry changes `speed` instead
        req.update({"speed": "standard"} if api == "anthropic" else {"temperature": 1.0})
    return req


def history_key(api):
    return "input" if api == "openai-responses" else "messages"


def retry_request(api, strategy, req, cut, n):
    """The request of retry number `n` (1, 2, …) after the attempt `cut` broke."""
    req = json.loads(json.dumps(req))  # a deep copy: the first request stays as sent
    key = history_key(api)
    if strategy == "resend-changed":
        if api == "anthropic":
            req["speed"] = "fast"
        else:
            req["temperature"] = round(1.0 - 0.25 * n, 2)
        req["extra_headers"] = {"Idempotency-Key": str(uuid.uuid4()), "X-Zoo-Retry": str(n)}
    elif strategy == "fallback-model":
        req["model"] = MODELS[api][1]
    elif strategy in ("prefill", "prefill-continue"):
        if cut.text:
            req[key].append({"role": "assistant", "content": cut.text})
        if strategy == "prefill-continue":
            req[key].append({"role": "user", "content": CONTINUE})
    elif strategy == "previous-response-id" and cut.response_id:
        req["previous_response_id"] = cut.response_id
        req["input"] = [{"role": "user", "content": CONTINUE}]
    return req


def next_request(api, strategy, req, kept_text, final):
    """The next step's request: the kept message and its tool results appended."""
    req = {k: v for k, v in req.items() if k not in ("extra_headers",)}
    req = json.loads(json.dumps(req))
    outputs = [(c, run_result(c)) for c in final.calls]
    if api == "anthropic":
        content = ([{"type": "text", "text": kept_text}] if kept_text else []) + [
            {"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]}
            for c in final.calls]
        req["messages"].append({"role": "assistant", "content": content})
        req["messages"].append({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": c["id"], "content": out} for c, out in outputs]})
    elif api == "openai-chat":
        msg = {"role": "assistant", "content": kept_text or None}
        if final.calls:
            msg["tool_calls"] = [{"id": c["id"], "type": "function", "function": {
                "name": c["name"], "arguments": json.dumps(c["args"])}} for c in final.calls]
        req["messages"].append(msg)
        for c, out in outputs:
            req["messages"].append({"role": "tool", "tool_call_id": c["id"], "content": out})
    else:
        results = [{"type": "function_call_output", "call_id": c["id"], "output": out}
                   for c, out in outputs]
        if strategy == "previous-response-id":
            req["previous_response_id"] = final.response_id
            req["input"] = results
        else:
            items = list(final.output_items or [])
            if strategy in CONTINUATIONS or not items:
                # what the client kept, as it shows it
                items = [{"role": "assistant", "content": kept_text}] + [
                    {"type": "function_call", "call_id": c["id"], "name": c["name"],
                     "arguments": json.dumps(c["args"])} for c in final.calls]
            req["input"] += items + results
    return req, outputs


_ran = {}


def run_result(call):
    return _ran[call["id"]]


# ---- the loop -------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--api", required=True, choices=sorted(STRATEGIES))
    ap.add_argument("--strategy", required=True)
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--log", required=True, help="the client's native event log (JSON lines)")
    ap.add_argument("--transcript")
    a = ap.parse_args()
    if a.strategy not in STRATEGIES[a.api]:
        ap.error(f"{a.api} has strategies {', '.join(STRATEGIES[a.api])}")
    if a.api == "anthropic":  # one SDK imported: each takes seconds on a loaded machine
        import anthropic

        client = anthropic.Anthropic(base_url=a.base_url, api_key="sk-ant-mock", max_retries=0)
    else:
        import openai

        client = openai.OpenAI(base_url=a.base_url, api_key="sk-mock", max_retries=0)
    transcript = Log(a.transcript)
    native = Native(a.log, f"zoo-{a.api}-{a.strategy}")
    req = first_request(a.api, a.strategy)
    for step in range(1, MAX_STEPS + 1):
        native(step, "turn_start", model=req["model"], agent="zoo")
        kept, final = run_step(a, client, step, req, native, transcript)
        if final is None:
            native(step, "turn_end", status="failed")
            return 1
        native(step, "output", text=kept)
        for c in final.calls:
            _ran[c["id"]] = run_tool(c["args"].get("command", ""), transcript, c["id"])
            native(step, "tool_exec", attempt=final.attempt, id=c["id"], name=c["name"],
                   args=c["args"])
        native(step, "turn_end")
        if not final.calls:
            return 0
        req, _ = next_request(a.api, a.strategy, req, kept, final)
    return 0


def run_step(a, client, step, req, native, transcript):
    """One model call, retried with the strategy. Returns (kept text, final Result)."""
    attempt_fn = ATTEMPT[a.api]
    stream = True
    first = req
    kept_prefix = ""
    for n in range(MAX_TRIES):
        send = {k: v for k, v in req.items()}
        extra = send.pop("extra_headers", None)
        if extra:
            send["extra_headers"] = extra
        native(step, "attempt_start", attempt=n, model=send["model"])
        transcript("attempt", step=step, attempt=n, stream=stream)

        def on_text(r, t, n=n):
            r.text += t
            native(step, "text", attempt=n, text=t)

        r = Result()
        try:
            attempt_fn(client, send, stream, on_text, r)
        except (TypeError, NameError, AttributeError, KeyError):
            raise  # the client's own bug, not a broken stream
        except Exception as e:  # noqa: BLE001: any broken stream goes to the strategy
            r.error = f"{type(e).__name__}: {str(e)[:200]}"
        if r.finish is None and a.strategy == "background-resume" and r.response_id:
            # the same attempt continues: no retry, no new attempt number
            transcript("resume", step=step, attempt=n, after=r.last_seq)
            try:
                resume_responses(client, r, on_text)
            except Exception as e:  # noqa: BLE001
                r.error = f"{type(e).__name__}: {str(e)[:200]}"
        for c in r.calls:
            native(step, "tool_call", attempt=n, id=c["id"], name=c["name"], args=c["args"])
        if r.usage and r.usage[0] is not None:
            native(step, "usage", attempt=n, input_tokens=r.usage[0], output_tokens=r.usage[1])
        if r.finish is not None:
            native(step, "finish", attempt=n, reason=str(r.finish))
            r.attempt = n
            return kept_prefix + r.text, r
        native(step, "error", attempt=n, message=r.error or "stream ended without its finish")
        transcript("broken", step=step, attempt=n, error=r.error, text=r.text)
        if n + 1 == MAX_TRIES:
            break
        native(step, "retry", attempt=n + 1, reason=a.strategy)
        if a.strategy in CONTINUATIONS:
            kept_prefix += r.text  # the partial text stays on screen; the continuation follows
        elif r.text:
            native(step, "render_reset")
        if a.strategy == "non-stream":
            stream = False
        req = retry_request(a.api, a.strategy, first if a.strategy not in CONTINUATIONS else req,
                            r, n + 1)
        time.sleep(0.2)
    return None, None


if __name__ == "__main__":
    sys.exit(main())
