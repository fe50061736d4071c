"""The agent registry: a service (``butler registry serve``), its client, and the
announcer that keeps a daemon registered."""

from butler.registry.announcer import Announcer as Announcer
from butler.registry.announcer import AnnouncerState as AnnouncerState
from butler.registry.client import RegistryClient as RegistryClient
from butler.registry.client import RegistryError as RegistryError
from butler.registry.model import AgentEntry as AgentEntry

__all__ = ["AgentEntry", "Announcer", "AnnouncerState", "RegistryClient", "RegistryError"]
