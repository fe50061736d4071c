"""The agents one daemon hosts beside its own, each served under ``/{id}/``.

Each hosted agent is a whole ``Daemon`` of its own (its config made by
``hosted_config``: own identity key, data folder, task store, audit log, tokens, skills,
peers, swarm limits and registry announcement) that builds its aiohttp app but never
listens: the daemon's listener hands it the requests under its prefix. The table is read
per request, so agents come and go at run time without rebuilding the (frozen) app:
``/{id}/{tail}`` is one route whose handler looks the agent up and passes the request,
its path cut to ``/{tail}``, to that agent's app, where its own middlewares (errors in
its bindings' shapes, its own token check) and routes see it as they would at ``/``.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from yarl import URL

from butler.config.hosted import AGENT_ID, hosted_config, parse_hosted_json
from butler.config.model import Config, HostedAgentConfig
from butler.config.node import ConfigError
from butler.hosting.store import HostedStore
from butler.identity.key_file import AgentIdentity
from butler.skills.catalog import SkillCatalog
from internal.http import IDENTITY, render_error
from internal.protocol.a2a.model import RequestError, SetupError, StateConflict, Unavailable

log = logging.getLogger("butler.hosting")


class HostedDaemon(Protocol):
    """What the host needs of a hosted agent's daemon (``butler.daemon.Daemon``)."""

    config: Config
    catalog: SkillCatalog  # its skills, for the daemon's AI catalog
    identity: AgentIdentity  # the key its catalog entry is signed by

    @property
    def app(self) -> web.Application: ...

    async def start(self) -> None: ...

    async def stop(self) -> None: ...


@dataclass(frozen=True)
class Hosted:
    config: HostedAgentConfig
    daemon: HostedDaemon
    source: str  # "config": the config file's agents:; "admin": added at run time


class AgentHost:
    def __init__(self, config: Config, url: Callable[[], str],
                 spawn: Callable[[Config], HostedDaemon], public_paths: tuple[str, ...]) -> None:
        """``url``: the daemon's own URL (known once it listens); ``spawn``: a daemon
        for a hosted agent's config, not yet started; ``public_paths``: the paths an
        agent's app answers without a token (its card)."""
        self.config = config
        self.public_paths = public_paths
        self.url = url
        self.spawn = spawn
        self.store = HostedStore(config.data_dir)
        self.running: dict[str, Hosted] = {}
        self._added: dict[str, dict[str, Any]] = {}  # added at run time, as sent: kept
        self._lock = asyncio.Lock()  # one add, remove or close at a time
        self._closed = False
        self._reserved: frozenset[str] = frozenset()

    # --- routing -------------------------------------------------------------------

    def mount(self, app: web.Application) -> None:
        """The one route of every hosted agent, added last: a path whose first segment
        is one of the daemon's own routes (``v2``, ``tasks``...) stays the daemon's."""
        firsts = set()
        for resource in app.router.resources():
            first = resource.canonical.lstrip("/").split("/", 1)[0]
            if AGENT_ID.fullmatch(first):
                firsts.add(first)
        self._reserved = frozenset(firsts)
        taken = "|".join(re.escape(name) for name in sorted(firsts)) or "(?!)"
        path = f"/{{agent:(?!(?:{taken})/)[a-z0-9][a-z0-9_-]{{0,63}}}}/{{tail:.*}}"
        # The methods the bindings use, not "*": any token is a method to aiohttp, and the
        # request metrics label each route by its method.
        for method in ("GET", "HEAD", "POST", "DELETE"):
            app.router.add_route(method, path, self.dispatch)

    def inner_gate(self, path: str) -> bool:
        """Whether ``path`` goes to a hosted agent, whose own gate checks its token. For an
        agent not hosted, only a public path (its card) is answered 404 at once; any other
        needs a token of the daemon's own agent first, as every route of the daemon does."""
        name, slash, tail = path[1:].partition("/")
        if not slash or name in self._reserved or AGENT_ID.fullmatch(name) is None:
            return False
        return name in self.running or "/" + tail in self.public_paths

    async def dispatch(self, request: web.Request) -> web.StreamResponse:
        name = request.match_info["agent"]
        raw = request.rel_url.raw_path  # as sent: its first segment may be %-encoded
        tail = raw[raw.index("/", 1):]
        query = request.rel_url.raw_query_string
        inner = request.clone(rel_url=URL(tail + ("?" + query if query else ""), encoded=True))
        hosted = self.running.get(name)
        if hosted is None:
            return render_error(inner, RequestError("not_found", f"no agent {name!r} here"))
        try:
            # aiohttp's own step from a request to its app's handler (the daemon's listener
            # took the first): the agent's router, then its middlewares, then the handler.
            return await hosted.daemon.app._handle(inner)
        finally:
            if IDENTITY in inner:  # for the daemon's request log: who called
                request[IDENTITY] = inner[IDENTITY]

    # --- the table -----------------------------------------------------------------

    def agent_url(self, agent_id: str) -> str:
        return f"{self.url().rstrip('/')}/{agent_id}"

    async def start(self) -> None:
        """The config's agents, then the ones added at run time before (a config entry
        of the same id wins: it is the operator's file)."""
        for agent in self.config.agents:
            await self._start(agent, "config")
        for agent_id, entry in self.store.load().items():
            if agent_id in self.running:
                log.warning("hosted agent %r is in the config file now: the one added at "
                            "run time is not served", agent_id)
                continue
            try:
                agent = parse_hosted_json(entry, self.config)
            except ConfigError as err:
                raise SetupError("invalid_config", f"{self.store.path}: agent {agent_id!r}: "
                                 f"{err.path}: {err.problem}") from None
            await self._start(agent, "admin")
            self._added[agent_id] = entry

    async def _start(self, agent: HostedAgentConfig, source: str) -> Hosted:
        if agent.id in self._reserved:
            raise SetupError("invalid_config", f"hosted agent id {agent.id!r} is the first "
                             "segment of one of the daemon's own routes; pick another")
        daemon = self.spawn(hosted_config(self.config, agent, self.agent_url(agent.id)))
        await daemon.start()
        hosted = self.running[agent.id] = Hosted(agent, daemon, source)
        log.info("hosting agent %s at %s", agent.id, self.agent_url(agent.id))
        return hosted

    async def add(self, entry: dict[str, Any]) -> Hosted:
        """An agent added at run time; kept, so the next start serves it again."""
        async with self._lock:
            if self._closed:  # an agent started now would never be stopped
                raise Unavailable("overloaded", "the daemon is stopping", retry_after=1)
            try:
                agent = parse_hosted_json(entry, self.config)
            except ConfigError as err:
                raise RequestError("invalid_request", f"{err.path or 'agent'}: "
                                   f"{err.problem}") from None
            if agent.id in self.running:
                raise StateConflict("agent_exists", f"agent {agent.id!r} is hosted already")
            cap = self.config.hosting.max_agents
            if len(self._added) >= cap:
                raise StateConflict("too_many_agents", f"{len(self._added)} agents added at "
                                    f"run time are hosted, the most hosting.max_agents "
                                    f"({cap}) allows; remove one first")
            try:
                hosted = await self._start(agent, "admin")
            except (SetupError, OSError) as err:
                raise RequestError("invalid_request",
                                   f"agent {agent.id!r} cannot start: {err}") from None
            try:
                self._keep({**self._added, agent.id: entry})
            except Unavailable:  # not kept, so not served: as if never added
                del self.running[agent.id]
                await hosted.daemon.stop()
                raise
            self._added[agent.id] = entry
            return hosted

    def _keep(self, added: dict[str, dict[str, Any]]) -> None:
        try:
            self.store.save(added)
        except OSError as err:
            raise Unavailable("overloaded", f"the hosted agents cannot be written to "
                              f"{self.store.path.name}: {err.strerror or err}; nothing "
                              "changed", retry_after=5) from None

    async def remove(self, agent_id: str) -> None:
        """Its routes answer 404 from now on; its running tasks get the daemon's
        ``shutdown_grace_seconds`` to end, then are canceled; its registry entry is
        withdrawn. Its data folder stays (the same id added again finds its tasks and key)."""
        async with self._lock:
            hosted = self.running.get(agent_id)
            if hosted is None:
                raise RequestError("not_found", f"no agent {agent_id!r} here")
            if hosted.source == "config":
                raise RequestError("invalid_request", f"agent {agent_id!r} is in the config "
                                   "file: remove it there and restart")
            remaining = {k: v for k, v in self._added.items() if k != agent_id}
            self._keep(remaining)  # first: an agent not forgotten is not stopped either
            self._added = remaining
            del self.running[agent_id]
            await hosted.daemon.stop()
            log.info("stopped hosting agent %s", agent_id)

    async def close(self) -> None:
        """All at once: each gives its running tasks the same grace, not one after another.
        After an add or remove in progress, and before any other: none starts from now on."""
        async with self._lock:
            self._closed = True
            stopping, self.running = list(self.running.values()), {}
        results = await asyncio.gather(*(h.daemon.stop() for h in stopping),
                                       return_exceptions=True)
        for hosted, result in zip(stopping, results, strict=True):
            if isinstance(result, BaseException):
                log.error("hosted agent %s did not stop cleanly: %r", hosted.config.id, result)
