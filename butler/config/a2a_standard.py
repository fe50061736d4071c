"""Config of the standard A2A bindings: ``configurations.a2a.push_notifications``."""

from __future__ import annotations

from butler.config import model as m
from butler.config.node import Node


def push_notifications(node: Node | None) -> m.PushNotificationsConfig:
    d = m.PushNotificationsConfig()
    if node is None:
        return d
    k = node.mapping({"enabled", "allow_private_networks", "allow_loopback", "max_attempts",
                      "timeout_seconds", "max_configs_per_task"})
    return m.PushNotificationsConfig(
        enabled=k["enabled"].boolean() if "enabled" in k else d.enabled,
        allow_private_networks=k["allow_private_networks"].boolean()
        if "allow_private_networks" in k else d.allow_private_networks,
        allow_loopback=k["allow_loopback"].boolean() if "allow_loopback" in k
        else d.allow_loopback,
        max_attempts=k["max_attempts"].integer(minimum=1, maximum=20)
        if "max_attempts" in k else d.max_attempts,
        timeout_seconds=k["timeout_seconds"].number(minimum=0.1)
        if "timeout_seconds" in k else d.timeout_seconds,
        max_configs_per_task=k["max_configs_per_task"].integer(minimum=1, maximum=100)
        if "max_configs_per_task" in k else d.max_configs_per_task,
    )
