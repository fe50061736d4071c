"""The hosted agents added at run time, kept in ``<data_dir>/hosted_agents.json`` so a
restart serves them again. Each is kept as it was sent (the config's shape: token hashes,
never tokens) and read again by the same parser at the next start."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from butler.config.hosted import hosted_config, parse_hosted_json
from butler.config.model import Config
from butler.storage import replace_private
from internal.protocol.a2a.codec import exact_json
from internal.protocol.a2a.model import ButlerError, SetupError

HOSTED_FILE = "hosted_agents.json"


class HostedStore:
    def __init__(self, data_dir: Path) -> None:
        self.path = data_dir / HOSTED_FILE

    def load(self) -> dict[str, dict[str, Any]]:
        """By id, in the order they were added."""
        try:
            data = exact_json.loads(self.path.read_bytes(), max_depth=64)
        except FileNotFoundError:
            return {}
        except (OSError, ButlerError) as exc:
            raise SetupError("invalid_config",
                             f"{self.path}: cannot read the hosted agents: {exc}") from None
        agents = data.get("agents") if isinstance(data, dict) else None
        if not isinstance(agents, list) or not all(
                isinstance(a, dict) and isinstance(a.get("id"), str) for a in agents):
            raise SetupError("invalid_config",
                             f"{self.path}: expected {{\"agents\": [{{\"id\": ...}}, ...]}}")
        return {a["id"]: a for a in agents}

    def save(self, agents: Mapping[str, Mapping[str, Any]]) -> None:
        replace_private(self.path, exact_json.dumps_bytes({"agents": list(agents.values())}))


def hosted_agent_config(config: Config, agent_id: str) -> Config:
    """The whole config of the agent ``agent_id`` that the daemon of ``config`` hosts: an
    entry of its config file, else one added at run time (kept in its data folder). For
    the commands that read an agent's data folder (``butler audit --agent``...)."""
    agent = next((a for a in config.agents if a.id == agent_id), None)
    if agent is None:
        store = HostedStore(config.data_dir)
        entry = store.load().get(agent_id)
        if entry is None:
            raise SetupError("invalid_config", f"{config.source}: no hosted agent "
                             f"{agent_id!r} (agents: in the file, or {store.path})")
        agent = parse_hosted_json(entry, config)
    return hosted_config(config, agent, f"{config.public_url.rstrip('/')}/{agent_id}")
