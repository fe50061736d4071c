"""``agents:`` in the config: each hosted agent's config is the daemon's with its own
identity, data folder, callers, skills, peers and limits; bad entries name their key."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from butler.config import ConfigError, parse_config
from butler.config.hosted import hosted_config, parse_hosted_json
from tests.support import run_cli

HASH = "a" * 64
TOP = ("agent: {id: top}\ndata_dir: /srv/top\n"
       f"configurations: {{a2a: {{token_hashes: ['{'b' * 64}']}}, swarm: {{max_depth: 5}}}}\n")


def test_a_hosted_agent_gets_its_own_identity_folder_callers_and_limits() -> None:
    cfg = parse_config(TOP + f"""
agents:
  - id: research
    name: Research
    token_hashes: [{{sha256: "{HASH}", name: alice, limits: {{max_usd_per_day: "2"}}}}]
    skills: [{{id: echo, builtin: echo, expose: true}}]
    swarm: {{max_depth: 2, budget_usd: "1.5"}}
  - id: plain
    token_hashes: ["{HASH}"]
""")
    research, plain = cfg.agents
    sub = hosted_config(cfg, research, "http://h:1/research")
    assert sub.agent.id == "research" and sub.agent.url == "http://h:1/research"
    assert sub.data_dir == Path("/srv/top/agents/research")
    assert [t.identity.name for t in sub.a2a.tokens] == ["alice"]
    assert sub.a2a.caller_limits["alice"].max_usd_per_day == Decimal("2")
    assert [s.id for s in sub.skills] == ["echo"] and sub.agents == ()
    assert (sub.swarm.max_depth, sub.swarm.budget_usd) == (2, Decimal("1.5"))
    assert hosted_config(cfg, plain, "u").swarm == cfg.swarm  # the daemon's by default
    assert plain.name == "plain" and plain.skills == ()


@pytest.mark.parametrize(("entry", "where", "problem"), [
    ("{id: Research, token_hashes: [HASH]}", "agents[0].id", "lowercase"),
    ("{id: v2, token_hashes: [HASH]}", "agents[0].id", "path of the daemon's own"),
    ("{id: top, token_hashes: [HASH]}", "agents[0]", "daemon's own agent.id"),
    ("{id: a}", "agents[0]", "needs token_hashes"),
    ("{id: a, token_hashes: []}", "agents[0].token_hashes", "at least one"),
    ("{token_hashes: [HASH]}", "agents[0]", "needs an id"),
    ("{id: a, token_hashes: [HASH], skills: [{id: p, builtin: planner}]}", "agents[0].skills[0]",
     "planner"),
    ("{id: a, token_hashes: [HASH], colour: red}", "agents[0].colour", "unknown key"),
])
def test_bad_entries_name_their_key(entry: str, where: str, problem: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(TOP + "agents: [" + entry.replace("HASH", f'"{HASH}"') + "]\n")
    assert info.value.path == where and problem in info.value.problem


def test_two_agents_of_one_id_are_refused() -> None:
    with pytest.raises(ConfigError, match="duplicate hosted agent id 'a'"):
        parse_config(TOP + f'agents: [{{id: a, token_hashes: ["{HASH}"]}}, '
                           f'{{id: a, token_hashes: ["{"c" * 64}"]}}]\n')


async def test_check_config_counts_hosted_agents_and_imports_their_plugins(
        tmp_path: Path) -> None:
    body = ("configurations: {a2a: {enabled: true, token_hashes: ['" + "b" * 64 + "']}}\n"
            f'agents: [{{id: a, token_hashes: ["{HASH}"], skills: [SKILL]}}]\n')
    good = tmp_path / "good.yaml"
    good.write_text(body.replace("SKILL", "{id: e, builtin: echo}"))
    code, out, err = await run_cli("check-config", str(good))
    assert code == 0 and out.strip().endswith("(0 skill(s), 0 peer(s), 1 hosted agent(s))"), err
    bad = tmp_path / "bad.yaml"
    bad.write_text(body.replace("SKILL", "{id: p, python: 'no.such.module:fn'}"))
    code, out, err = await run_cli("check-config", str(bad))
    assert code == 2 and "agents[0].skills[0].python:" in err


def test_hosting_allows_no_local_access_unless_asked() -> None:
    assert not parse_config(TOP).hosting.allow_local_access
    assert parse_config(TOP + "hosting: {allow_local_access: true}\n").hosting.allow_local_access
    assert parse_config(TOP).hosting.max_agents == 16
    assert parse_config(TOP + "hosting: {max_agents: 0}\n").hosting.max_agents == 0
    with pytest.raises(ConfigError, match=r"hosting\.max_agents"):
        parse_config(TOP + "hosting: {max_agents: -1}\n")
    with pytest.raises(ConfigError, match="unknown key"):
        parse_config(TOP + "hosting: {trust: true}\n")


def test_an_agent_added_at_run_time_never_gets_the_registrys_peer_token(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PEER_SECRET", "operator-peer-token")
    registry = ("configurations: {a2a: {token_hashes: ['" + "b" * 64 + "']}, registry: "
                "{url: 'http://127.0.0.1:9', peer_token_env: PEER_SECRET, "
                "trusted_registrants: [bob]}}\n")
    entry = {"id": "a", "token_hashes": [HASH]}
    for local, kept in ((False, ""), (True, "operator-peer-token")):
        parent = parse_config("agent: {id: top}\n" + registry + (
            "hosting: {allow_local_access: true}\n" if local else ""))
        assert parent.registry.peer_token == "operator-peer-token"
        agent = parse_hosted_json(entry, parent)
        assert hosted_config(parent, agent, "u").registry.peer_token == kept
