"""The OpenAI chat-completions wire, as far as the planner speaks it: the request body,
a whole answer (JSON) and a streamed one (server-sent ``data:`` chunks whose deltas add
up to the same answer). Anything that does not read as that wire is
``planner_bad_response``: the endpoint is not what the config says it is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from butler.skills.base import SkillFailed

BAD_RESPONSE = "planner_bad_response"


@dataclass(frozen=True, slots=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it; read by the toolbox


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int
    output_tokens: int


@dataclass(frozen=True, slots=True)
class Completion:
    content: str
    tool_calls: tuple[ToolCall, ...] = ()
    usage: Usage | None = None  # None when the endpoint did not say

    def message(self) -> dict[str, Any]:
        """This answer as the assistant message of the next request."""
        out: dict[str, Any] = {"role": "assistant", "content": self.content or None}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function",
                 "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls]
        return out


def request_body(model: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]],
                 max_tokens: int, stream: bool) -> dict[str, Any]:
    body: dict[str, Any] = {"model": model, "messages": messages, "max_tokens": max_tokens,
                            "stream": stream}
    if tools:
        body["tools"] = tools
    if stream:
        # Without it a streamed answer carries no usage, and a call would be charged its
        # whole reservation.
        body["stream_options"] = {"include_usage": True}
    return body


def bad(message: str) -> SkillFailed:
    return SkillFailed(BAD_RESPONSE, message)


def _object(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise bad(f"{what} is not a JSON object")
    return value


def _text(value: Any, what: str) -> str:
    if value is None:
        return ""
    if not isinstance(value, str):
        raise bad(f"{what} is not a string")
    return value


def _usage(value: Any) -> Usage | None:
    if value is None:
        return None
    usage = _object(value, "usage")
    prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
    if not (_count(prompt) and _count(completion)):
        raise bad("usage does not hold prompt_tokens and completion_tokens as counts")
    return Usage(prompt, completion)


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _choice(data: dict[str, Any]) -> dict[str, Any]:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise bad("the answer has no choices")
    return _object(choices[0], "choices[0]")


def _list(value: Any, what: str) -> list[Any]:
    """A JSON list, or nothing for null or absent."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise bad(f"{what} is not a list")
    return value


def read_answer(raw: bytes) -> Completion:
    """A whole (non-streamed) answer."""
    try:
        data = _object(json.loads(raw), "the answer")
    except (ValueError, UnicodeDecodeError):
        raise bad("the answer is not JSON") from None
    message = _object(_choice(data).get("message"), "choices[0].message")
    calls = []
    for i, raw_call in enumerate(_list(message.get("tool_calls"), "tool_calls")):
        call = _object(raw_call, f"tool_calls[{i}]")
        function = _object(call.get("function"), f"tool_calls[{i}].function")
        calls.append(ToolCall(_text(call.get("id"), f"tool_calls[{i}].id") or f"call_{i}",
                              _text(function.get("name"), f"tool_calls[{i}].function.name"),
                              _arguments(function.get("arguments"), i)))
    return Completion(_text(message.get("content"), "choices[0].message.content"),
                      tuple(calls), _usage(data.get("usage")))


def _arguments(value: Any, i: int) -> str:
    """Some servers (Ollama's native API) send arguments as an object, not as JSON text."""
    if isinstance(value, dict):
        return json.dumps(value)
    return _text(value, f"tool_calls[{i}].function.arguments")


@dataclass
class _PartialCall:
    id: str = ""
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class StreamedAnswer:
    """Chunks of a streamed answer, added up: ``feed`` each ``data:`` payload (the text
    after ``data:``) and get the text it adds; ``done`` once ``[DONE]`` came."""

    def __init__(self) -> None:
        self._content: list[str] = []
        self._calls: dict[int, _PartialCall] = {}
        self._usage: Usage | None = None
        self.done = False

    def feed(self, payload: str) -> str:
        if payload.strip() == "[DONE]":
            self.done = True
            return ""
        try:
            chunk = _object(json.loads(payload), "a streamed chunk")
        except ValueError:
            raise bad("a streamed chunk is not JSON") from None
        if chunk.get("usage") is not None:
            self._usage = _usage(chunk["usage"])
        choices = chunk.get("choices")
        if not choices:  # the usage chunk has none
            return ""
        if not isinstance(choices, list):
            raise bad("a streamed chunk's choices is not a list")
        delta = _object(_object(choices[0], "choices[0]").get("delta") or {}, "delta")
        for raw_call in _list(delta.get("tool_calls"), "a delta's tool_calls"):
            self._add_call(_object(raw_call, "a tool_calls delta"))
        text = _text(delta.get("content"), "delta.content")
        self._content.append(text)
        return text

    def _add_call(self, call: dict[str, Any]) -> None:
        index = call.get("index", len(self._calls))
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < 128:
            raise bad("a tool_calls delta has no usable index")
        partial = self._calls.setdefault(index, _PartialCall())
        partial.id = partial.id or _text(call.get("id"), "tool_calls[].id")
        function = _object(call.get("function") or {}, "tool_calls[].function")
        partial.name += _text(function.get("name"), "tool_calls[].function.name")
        partial.arguments.append(_arguments(function.get("arguments"), index))

    def completion(self) -> Completion:
        calls = tuple(ToolCall(p.id or f"call_{i}", p.name, "".join(p.arguments))
                      for i, p in sorted(self._calls.items()))
        return Completion("".join(self._content), calls, self._usage)
