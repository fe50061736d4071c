"""The validated configuration: frozen values, built once in ``main()``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from internal.http import TokenEntry
from internal.shares import Share

DEFAULT_PORT = 8081
DEFAULT_BIND = "127.0.0.1"


@dataclass(frozen=True)
class Limits:
    max_body_bytes: int = 1024 * 1024
    max_json_depth: int = 32
    header_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    max_connections: int = 256
    max_connections_per_address: int = 0  # 0: three quarters of max_connections
    max_inflight: int = 128
    max_streams: int = 256  # open event streams, apart from max_inflight
    max_streams_per_caller: int = 32
    shutdown_grace_seconds: float = 30.0
    refusal_hold_seconds: float = 1.0  # 0: refusals are answered at once


@dataclass(frozen=True)
class TlsConfig:
    cert_file: Path
    key_file: Path


@dataclass(frozen=True)
class PushNotificationsConfig:
    """A2A push notifications: webhooks are never loopback, link-local or metadata
    addresses; private networks only when allowed."""

    enabled: bool = True
    allow_private_networks: bool = False
    allow_loopback: bool = False  # webhooks on this machine: local development only
    max_attempts: int = 5
    timeout_seconds: float = 10.0
    max_configs_per_task: int = 10


@dataclass(frozen=True)
class CallerLimits:
    """What one caller identity may do across all its task trees (a token's ``limits``).

    None: no limit of that kind. Skills and capabilities are grants (403 ``forbidden``
    outside them); the caps are rolling windows kept in ``spend.db`` (402
    ``spend_limit_reached``). docs/security.md"""

    skills: tuple[str, ...] | None = None
    capabilities: tuple[str, ...] | None = None
    max_tasks_per_hour: int | None = None
    max_tasks_per_day: int | None = None
    max_usd_per_task: Decimal | None = None
    max_usd_per_hour: Decimal | None = None
    max_usd_per_day: Decimal | None = None

    @property
    def caps_spend(self) -> bool:
        """Whether this caller's tasks are counted (and so recorded in ``spend.db``)."""
        return any(v is not None for v in (
            self.max_tasks_per_hour, self.max_tasks_per_day, self.max_usd_per_task,
            self.max_usd_per_hour, self.max_usd_per_day))


@dataclass(frozen=True)
class A2AConfig:
    enabled: bool = False
    port: int = DEFAULT_PORT
    bind_address: str = DEFAULT_BIND
    grpc_port: int | None = None  # the A2A gRPC binding's port (0: any free); None: not served
    tokens: tuple[TokenEntry, ...] = ()
    # By identity name: the ``limits`` of its token entries (one set per identity).
    caller_limits: Mapping[str, CallerLimits] = field(default_factory=dict)
    tls: TlsConfig | None = None
    legacy_v03_card: bool = True  # the 0.3 fields (url, preferredTransport...) in the card
    # Callers without a token get this tier (None: refused). Loopback binds only.
    anonymous_tier: str | None = None
    # Host names the listener answers to besides IP addresses, localhost (loopback and
    # wildcard binds) and agent.url's host; and other sites' origins whose pages may call.
    public_hosts: tuple[str, ...] = ()
    allowed_origins: tuple[str, ...] = ()
    push_notifications: PushNotificationsConfig = field(
        default_factory=PushNotificationsConfig)


@dataclass(frozen=True)
class RateLimitConfig:
    """Token buckets (0 turns a limit off) and a cap on each caller's running tasks."""

    per_caller_per_second: float = 1000.0
    per_caller_burst: float = 2000.0
    per_address_per_second: float = 2000.0
    per_address_burst: float = 4000.0
    max_inflight_tasks_per_caller: int = 256


@dataclass(frozen=True)
class SharesConfig:
    """Each shared pool's size and the parts one caller, and all unauthenticated clients
    together, may hold (``shares:``; ``internal.shares``; the table in docs/security.md).
    The in-flight and stream totals are ``server.max_inflight`` and ``server.max_streams``."""

    inflight: Share = field(default_factory=lambda: Share(128))
    streams: Share = field(default_factory=lambda: Share(256, 32))
    running_tasks: Share = field(default_factory=lambda: Share(4096, 256))
    mcp_sessions: Share = field(default_factory=lambda: Share(1000))
    push_configs: Share = field(default_factory=lambda: Share(10_000))
    memory_entries: Share = field(default_factory=lambda: Share(100_000))


@dataclass(frozen=True)
class MetricsConfig:
    enabled: bool = True
    listen: str = ""  # "" -> GET /metrics on the main port, authenticated


@dataclass(frozen=True)
class SwarmConfig:
    enabled: bool = True
    max_depth: int = 4
    budget_usd: Decimal = Decimal("5.0")
    workspace_ttl_hours: float = 24.0
    max_children_per_task: int = 8
    max_outbound_concurrency: int = 32
    # How long a delegated task waits for its caller's answer to a peer's question.
    input_wait_seconds: float = 300.0
    routing_threshold: float = 0.57  # butler.routing.DEFAULT_THRESHOLD
    # The intent router's semantic stage, when the `semantic` extra is installed.
    routing_semantic: bool = True


@dataclass(frozen=True)
class RegistryConfig:
    self_register: bool = False
    health_ttl_minutes: float = 5.0
    url: str = ""
    token: str = field(repr=False, default="")
    peer_token: str = field(repr=False, default="")
    cache_seconds: float = 10.0
    allow_private_networks: bool = True
    allow_loopback: bool = True
    # Registry identities (who registered an entry) whose agents get ``peer_token``.
    trusted_registrants: tuple[str, ...] = ()
    # Publisher domains whose ARD search results (a task in plain words) get ``peer_token``.
    trusted_publishers: tuple[str, ...] = ()


@dataclass(frozen=True)
class McpServerConfig:
    allowed_capabilities: tuple[str, ...] | None = None


@dataclass(frozen=True)
class McpToolsConfig:
    """A skill entry's ``mcp:``: an MCP server whose tools become skills (docs/mcp.md)."""

    command: tuple[str, ...] | None = None  # the server's argv, spoken to over stdio
    url: str | None = None  # or its streamable HTTP endpoint
    tools: tuple[str, ...] | None = None  # only these tools; None: every tool it lists
    # A bearer token sent to ``url`` (and nowhere else); empty: none.
    token: str = field(default="", repr=False)


@dataclass(frozen=True)
class SkillConfig:
    id: str
    name: str
    description: str = ""
    capabilities: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()
    cost_usd: Decimal = Decimal("0")
    timeout_seconds: float = 60.0
    expose: bool = False
    tier: str | None = None
    builtin: str | None = None
    command: tuple[str, ...] | None = None
    python: str | None = None
    mcp: McpToolsConfig | None = None
    max_output_bytes: int = 1024 * 1024
    # Media types of the parts it takes and gives (A2A inputModes/outputModes).
    input_modes: tuple[str, ...] = ("text/plain", "application/json")
    output_modes: tuple[str, ...] = ("text/plain", "application/json")
    # A JSON Schema (``type: object``) of ``input``: MCP's inputSchema, on the /v2 card.
    # Plain JSON values, never mutated; left out of the hash, as a dict cannot be hashed.
    input_schema: dict[str, Any] | None = field(default=None, hash=False)
    # The JSON Schema (``type: object``) of its answer's data part: MCP's outputSchema.
    output_schema: dict[str, Any] | None = field(default=None, hash=False)
    # An MCP server's tool's annotations (readOnlyHint, destructiveHint...), passed on to
    # MCP hosts as given (docs/mcp.md).
    tool_annotations: dict[str, Any] | None = field(default=None, hash=False)


@dataclass(frozen=True)
class PeerConfig:
    name: str
    url: str
    token: str = field(repr=False, default="")
    capabilities: tuple[str, ...] = ()
    spend_cap_usd: Decimal | None = None
    cost_usd: Decimal = Decimal("0")
    connect_timeout_seconds: float = 3.0
    timeout_seconds: float = 60.0
    max_response_bytes: int = 4 * 1024 * 1024
    ca_file: Path | None = None
    protocol: str = "butler"  # "butler": Butler's /v2 API; "a2a": a standard A2A agent


@dataclass(frozen=True)
class PlannerConfig:
    """The LLM planner's endpoint (``planner:``): any OpenAI-compatible chat completions
    URL. Its token goes only to ``url``. docs/intent.md#the-llm-planner"""

    url: str
    model: str
    token: str = field(repr=False, default="")
    price_per_1k_input_usd: Decimal = Decimal("0")
    price_per_1k_output_usd: Decimal = Decimal("0")
    max_steps: int = 8  # model calls per plan
    max_tokens: int = 1024  # the most one model call may answer with (and is reserved for)
    timeout_seconds: float = 60.0  # one model call, within the task's own deadline
    connect_timeout_seconds: float = 3.0
    stream: bool = True  # SSE from the endpoint; text is relayed to the task's streams
    max_response_bytes: int = 4 * 1024 * 1024
    # "never": the planner runs only as a skill; "unsure": a task in plain words that the
    # intent router declines or finds a close call goes to the planner skill instead.
    when: str = "never"
    shortlist: int = 8  # the router's best candidates the model sees as tools


@dataclass(frozen=True)
class TasksConfig:
    retention_hours: float = 168.0
    default_timeout_seconds: float = 300.0
    max_page_size: int = 200


@dataclass(frozen=True)
class AuditConfig:
    retention_days: float = 0.0  # 0: keep the whole log
    segment_records: int = 65_536


@dataclass(frozen=True)
class TelemetryConfig:
    exporter: str = "none"
    service_name: str = ""
    otlp_endpoint: str = ""


@dataclass(frozen=True)
class LoggingConfig:
    level: str = "info"
    format: str = "kv"


@dataclass(frozen=True)
class AgentConfig:
    id: str = "butler"
    name: str = "Butler"
    description: str = "A Butler A2A delegation agent"
    url: str = ""
    version: str = "0.1.0"
    # The domain its catalog entries' URNs name (urn:air:<publisher>:...); "": the host
    # of its URL.
    publisher: str = ""


@dataclass(frozen=True)
class HostingConfig:
    """``hosting:``: what the admin API may give an agent it adds at run time."""

    # False: only builtin skills, no peers, the daemon's registry settings, no ${VAR}: an
    # admin token cannot make the daemon run code, read a file or variable, or call a URL.
    allow_local_access: bool = False
    # The most agents the admin API may have added at once: each opens its own SQLite
    # files, tasks and threads (the config file's agents do not count).
    max_agents: int = 16


@dataclass(frozen=True)
class HostedAgentConfig:
    """One more agent served by this daemon under ``/{id}/`` (``agents:``; docs/hosting.md):
    its own name, callers' tokens, skills, peers, swarm limits and registry announcement.
    The rest (listener, limits, telemetry, planner) is the daemon's."""

    id: str  # the URL path segment and agent id
    name: str
    description: str = ""
    version: str = "0.1.0"
    tokens: tuple[TokenEntry, ...] = ()
    caller_limits: Mapping[str, CallerLimits] = field(default_factory=dict)
    skills: tuple[SkillConfig, ...] = ()
    peers: tuple[PeerConfig, ...] = ()
    swarm: SwarmConfig | None = None  # None: the daemon's
    registry: RegistryConfig | None = None  # None: the daemon's


@dataclass(frozen=True)
class Config:
    source: str
    agent: AgentConfig
    data_dir: Path
    a2a: A2AConfig
    swarm: SwarmConfig
    registry: RegistryConfig
    mcp_server: McpServerConfig
    limits: Limits
    tasks: TasksConfig
    audit: AuditConfig
    telemetry: TelemetryConfig
    logging: LoggingConfig
    skills: tuple[SkillConfig, ...] = ()
    peers: tuple[PeerConfig, ...] = ()
    rate_limits: RateLimitConfig = field(default_factory=RateLimitConfig)
    metrics: MetricsConfig = field(default_factory=MetricsConfig)
    planner: PlannerConfig | None = None
    agents: tuple[HostedAgentConfig, ...] = ()  # served under /{id}/ beside this one
    hosting: HostingConfig = field(default_factory=HostingConfig)
    shares: SharesConfig = field(default_factory=SharesConfig)
    # Names of the environment variables tokens were read from (never their values).
    secret_env: frozenset[str] = frozenset()

    def secret_values(self) -> tuple[str, ...]:
        """Every token this config sends somewhere (peers, planner, registry, MCP servers;
        its hosted agents' too): what a remote may quote back and must not be repeated."""
        found: list[str] = []
        for peers, skills, registry in ((self.peers, self.skills, self.registry),
                                        *((a.peers, a.skills, a.registry) for a in self.agents)):
            found += [p.token for p in peers]
            found += [s.mcp.token for s in skills if s.mcp is not None]
            if registry is not None:
                found += [registry.token, registry.peer_token]
        if self.planner is not None:
            found.append(self.planner.token)
        return tuple(sorted({t for t in found if t}))

    @property
    def public_url(self) -> str:
        return self.agent.url or http_url(self.a2a.bind_address, self.a2a.port,
                                          tls=self.a2a.tls is not None)


def http_url(host: str, port: int, *, tls: bool = False) -> str:
    """``http://host:port`` (https with TLS), with an IPv6 address in brackets."""
    scheme = "https" if tls else "http"
    return f"{scheme}://[{host}]:{port}" if ":" in host else f"{scheme}://{host}:{port}"
