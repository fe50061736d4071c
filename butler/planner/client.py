"""The planner's one model call: a POST to the configured chat-completions URL, through the
outbound guard and session every Butler call uses, answered as JSON or streamed as SSE.

The token is sent only to the configured URL (redirects are never followed) and never
appears in a message or a log line. Every failure is one of two task codes:
``planner_unavailable`` (down, refused, slow, an HTTP error) or ``planner_bad_response``
(an answer that is not the chat-completions wire).
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp

from butler.config.model import PlannerConfig
from butler.planner.wire import Completion, StreamedAnswer, bad, read_answer, request_body
from butler.skills.base import SkillFailed
from internal.http import (
    CONFIGURED,
    AnswerTooLarge,
    OutboundGuard,
    capped,
    outbound_session,
    read_capped,
    sse_events,
)
from internal.protocol.a2a.client import transport_errors
from internal.protocol.a2a.model import DelegationFailed

UNAVAILABLE = "planner_unavailable"


class PlannerTimeout(SkillFailed):
    """The endpoint had the request but did not answer in time: it may have done the
    work (and billed it), so the call is charged as if it had (plan.py)."""
ERROR_TEXT_CHARS = 300  # of an endpoint's error message, quoted in the task's error
TextSink = Callable[[str], Awaitable[None]]


class ChatClient:
    """One per daemon; ``aclose`` when it stops."""

    def __init__(self, cfg: PlannerConfig, guard: OutboundGuard | None = None) -> None:
        self.cfg = cfg
        # The operator wrote this URL into the config, as it writes peers: loopback (a
        # local Ollama) and the LAN are allowed, metadata and link-local never.
        self._guard = guard or OutboundGuard(CONFIGURED)
        self._session: aiohttp.ClientSession | None = None
        self._headers = {"Content-Type": "application/json",
                         "Accept": "text/event-stream, application/json"}
        if cfg.token:
            self._headers["Authorization"] = f"Bearer {cfg.token}"

    def __repr__(self) -> str:  # never the headers: they hold the token
        return f"ChatClient({self.cfg.url!r}, model={self.cfg.model!r})"

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = outbound_session(self._guard, limit=16)
        return self._session

    async def complete(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]], *,
                       deadline: float, on_text: TextSink | None = None) -> Completion:
        """One model call, within ``timeout_seconds`` and ``deadline`` (monotonic);
        ``on_text`` gets the answer's text as it arrives: piece by piece when streamed,
        at once when the endpoint answered with JSON."""
        cfg = self.cfg
        timeout = min(cfg.timeout_seconds, deadline - time.monotonic())
        if timeout <= 0:
            raise SkillFailed(UNAVAILABLE, "no time left for the planner's next model call")
        body = json.dumps(request_body(cfg.model, messages, tools, cfg.max_tokens,
                                       cfg.stream)).encode()
        client_timeout = aiohttp.ClientTimeout(total=timeout,
                                               sock_connect=cfg.connect_timeout_seconds)
        try:
            with transport_errors("the planner endpoint", timeout):
                async with self._http().post(cfg.url, data=body, headers=self._headers,
                                             allow_redirects=False,
                                             timeout=client_timeout) as resp:
                    if resp.status != 200:
                        # An endpoint may quote the token back: the task's error is
                        # redacted (RunDeps.redact), as every remote's words are.
                        raise SkillFailed(UNAVAILABLE, await _http_error(resp))
                    streamed = resp.content_type == "text/event-stream"
                    try:
                        if streamed:
                            return await self._streamed(resp, on_text)
                        answer = read_answer(await read_capped(
                            resp.content.iter_chunked(65536), cfg.max_response_bytes,
                            announced=resp.content_length))
                    except AnswerTooLarge as exc:
                        raise bad(f"the {'stream' if streamed else 'answer'} exceeds "
                                  f"{exc.limit} bytes") from None
        except DelegationFailed as exc:  # the transport's failure, named for the planner
            if exc.code == "peer_timeout":
                raise PlannerTimeout(UNAVAILABLE, exc.message) from None
            raise SkillFailed(UNAVAILABLE, exc.message) from None
        if answer.content and on_text is not None:
            await on_text(answer.content)  # a whole answer's text arrives all at once
        return answer

    async def _streamed(self, resp: aiohttp.ClientResponse,
                        on_text: TextSink | None) -> Completion:
        answer = StreamedAnswer()
        limit = self.cfg.max_response_bytes
        async for event in sse_events(capped(resp.content.iter_any(), limit), limit):
            text = answer.feed(event.data)
            if answer.done:
                return answer.completion()
            if text and on_text is not None:
                await on_text(text)
        raise SkillFailed(UNAVAILABLE, "the planner endpoint's stream ended before [DONE]")


async def _http_error(resp: aiohttp.ClientResponse) -> str:
    """What the endpoint said went wrong: its ``error.message`` when it sent one (cut
    short), otherwise only the status."""
    said = ""
    try:
        data = json.loads(await read_capped(resp.content.iter_chunked(65536), 64 * 1024,
                                            announced=resp.content_length))
        error = data.get("error") if isinstance(data, dict) else None
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str):
            said = f": {message[:ERROR_TEXT_CHARS]}"
    except (ValueError, UnicodeDecodeError, aiohttp.ClientError, AnswerTooLarge):
        pass
    return f"the planner endpoint answered HTTP {resp.status}{said}"
