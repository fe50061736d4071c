"""An async client for the registry's HTTP API (used by the daemon and the CLI)."""

from __future__ import annotations

from collections.abc import Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote

import aiohttp

from butler.registry.model import AgentEntry, check_url
from internal.http import CONFIGURED, AnswerTooLarge, OutboundGuard, outbound_session, read_capped
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import ButlerError, DelegationFailed

MAX_RESPONSE_BYTES = 16 * 1024 * 1024


class RegistryError(DelegationFailed):
    """A registry call failed, with the registry's code or one of ours (``unreachable``,
    ``bad_response``). ``http_status`` is None when no HTTP answer came back."""

    fallback_code = "registry_error"

    def __init__(
        self, message: str, *, status: int | None, code: str, retry_after: float | None = None
    ) -> None:
        super().__init__(code, message, retry_after=retry_after)
        self.http_status = status

    @property
    def retryable(self) -> bool:
        """Worth trying again later: unreachable, overloaded or rate-limited."""
        status = self.http_status
        return status is None or status >= 500 or status in (408, 429)


class RegistryClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        session: aiohttp.ClientSession | None = None,
        timeout: float = 10.0,
    ) -> None:
        try:
            self._base = check_url(base_url, "registry url").rstrip("/")
        except ButlerError as exc:
            raise ValueError(exc.message) from None
        self._token = token
        self._session = session
        self._owns_session = session is None
        self._timeout = aiohttp.ClientTimeout(total=timeout)

    def __repr__(self) -> str:
        return f"RegistryClient({self._base!r})"

    @property
    def base_url(self) -> str:
        return self._base

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_session and self._session is not None:
            await self._session.close()
            self._session = None

    async def register(
        self, name: str, card: Mapping[str, Any], *, url: str | None = None,
        ttl_seconds: int | None = None,
    ) -> AgentEntry:
        body: dict[str, Any] = {"card": dict(card)}
        if url is not None:
            body["url"] = url
        if ttl_seconds is not None:
            body["ttl_seconds"] = ttl_seconds
        return _entry(await self._call("PUT", _path(name), body=body))

    async def heartbeat(self, name: str, *, ttl_seconds: int | None = None) -> AgentEntry:
        body = {"ttl_seconds": ttl_seconds} if ttl_seconds is not None else {}
        return _entry(await self._call("POST", _path(name) + "/heartbeat", body=body))

    async def deregister(self, name: str) -> None:
        await self._call("DELETE", _path(name))

    async def get(self, name: str) -> AgentEntry:
        return _entry(await self._call("GET", _path(name)))

    async def find(
        self,
        *,
        capability: str | None = None,
        skill: str | None = None,
        tag: str | None = None,
        text: str | None = None,
        page_size: int | None = None,
        max_results: int = 1000,
    ) -> list[AgentEntry]:
        """Live agents matching every filter given (none: all), following cursors until
        ``max_results`` agents have been collected."""
        params = {k: v for k, v in (
            ("capability", capability), ("skill", skill), ("tag", tag), ("q", text),
            ("limit", str(page_size) if page_size else None),
        ) if v is not None}
        found: list[AgentEntry] = []
        while len(found) < max_results:
            page = await self._call("GET", "/v1/agents", params=params)
            if not isinstance(page, dict) or not isinstance(page.get("agents"), list):
                raise RegistryError("registry answered an unexpected page", status=200,
                                    code="bad_response")
            found += [_entry(item) for item in page["agents"]]
            cursor = page.get("next_cursor")
            if not isinstance(cursor, str) or not cursor:
                break
            params["cursor"] = cursor
        return found[:max_results]

    async def search(self, text: str, *, filters: Mapping[str, list[str]] | None = None,
                     federation: str = "auto", page_size: int = 10) -> dict[str, Any]:
        """ARD ``POST /search``: the answer as sent (``results``, ``referrals``...)."""
        query: dict[str, Any] = {"text": text}
        if filters:
            query["filter"] = dict(filters)
        answer = await self._call("POST", "/search", body={
            "query": query, "federation": federation, "pageSize": page_size})
        if not isinstance(answer, dict) or not isinstance(answer.get("results"), list):
            raise RegistryError("registry answered a search without results", status=200,
                                code="bad_response")
        return answer

    async def _call(
        self, method: str, path: str, *, body: Any = None, params: Mapping[str, str] | None = None
    ) -> Any:
        if self._session is None:  # the registry's URL is the operator's to choose
            self._session = outbound_session(OutboundGuard(CONFIGURED))
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = exact_json.dumps_bytes(body)
            headers["Content-Type"] = "application/json"
        try:
            async with self._session.request(
                method, self._base + path, data=data, params=params, headers=headers,
                timeout=self._timeout, allow_redirects=False,
            ) as resp:
                raw = await read_capped(resp.content.iter_chunked(64 * 1024),
                                        MAX_RESPONSE_BYTES, announced=resp.content_length)
                status, retry_after = resp.status, resp.headers.get("Retry-After")
        except AnswerTooLarge:
            raise RegistryError("registry response too large", status=resp.status,
                                code="bad_response") from None
        except (aiohttp.ClientError, TimeoutError, ButlerError) as exc:
            reason = getattr(exc, "message", None) or str(exc) or type(exc).__name__
            raise RegistryError(f"registry unreachable: {reason}", status=None,
                                code="unreachable") from None
        decoded = _decode(raw, status)
        if status >= 400:
            raise _error(decoded, status, retry_after)
        return decoded


def _path(name: str) -> str:
    return "/v1/agents/" + quote(name, safe="")


def _decode(raw: bytes, status: int) -> Any:
    if not raw.strip():
        return None
    try:
        return exact_json.loads(raw, max_depth=64)
    except ButlerError:
        if status >= 400:
            return None
        raise RegistryError(f"registry answered {status} with malformed JSON", status=status,
                            code="bad_response") from None


def _error(decoded: Any, status: int, retry_after: str | None) -> RegistryError:
    err = decoded.get("error") if isinstance(decoded, dict) else None
    if isinstance(decoded, dict) and "errorCode" in decoded:  # ARD's shape
        err = {"code": decoded["errorCode"], "message": decoded.get("message", "")}
    code = str(err.get("code", "")) if isinstance(err, dict) else ""
    message = str(err.get("message", "")) if isinstance(err, dict) else ""
    code = code or f"http_{status}"
    wait = float(retry_after) if retry_after and retry_after.isdigit() else None
    text = f"registry answered {status} {code}" + (f": {message}" if message else "")
    return RegistryError(text, status=status, code=code, retry_after=wait)


def _entry(data: Any) -> AgentEntry:
    try:
        return AgentEntry.from_json(data)
    except (KeyError, TypeError, ValueError, AttributeError):
        raise RegistryError("registry answered an entry without the expected fields",
                            status=200, code="bad_response") from None
