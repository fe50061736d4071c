"""Config keys of the standard A2A bindings: defaults, values and errors naming the key."""

from __future__ import annotations

import pytest

from butler.config import ConfigError, parse_config

PEER = "peers: [{name: p, url: 'http://x', token_env: T, protocol: %s}]"


def test_defaults_and_values() -> None:
    a2a = parse_config("").a2a
    assert a2a.legacy_v03_card is True
    push = a2a.push_notifications
    assert push.enabled and not push.allow_private_networks and push.max_attempts == 5
    cfg = parse_config("""
configurations:
  a2a:
    legacy_v03_card: false
    push_notifications: {enabled: false, allow_private_networks: true, max_attempts: 2,
                         timeout_seconds: 1.5, max_configs_per_task: 3}
""" + PEER % "a2a", env={"T": "token"})
    assert cfg.a2a.legacy_v03_card is False
    push = cfg.a2a.push_notifications
    assert (push.enabled, push.allow_private_networks, push.max_attempts,
            push.timeout_seconds, push.max_configs_per_task) == (False, True, 2, 1.5, 3)
    assert cfg.peers[0].protocol == "a2a"
    assert parse_config(PEER % "butler", env={"T": "t"}).peers[0].protocol == "butler"


@pytest.mark.parametrize(("text", "key"), [
    ("configurations: {a2a: {legacy_v03_card: maybe}}", "configurations.a2a.legacy_v03_card"),
    ("configurations: {a2a: {push_notifications: {max_attempts: 0}}}",
     "configurations.a2a.push_notifications.max_attempts"),
    ("configurations: {a2a: {push_notifications: {timeout_seconds: 0}}}",
     "configurations.a2a.push_notifications.timeout_seconds"),
    (PEER % "grpc", "peers[0].protocol"),
])
def test_bad_values_name_the_key(text: str, key: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse_config(text, file="bad.yaml", env={"T": "t"})
    assert str(info.value).startswith(f"bad.yaml: {key}: "), str(info.value)
