"""The identity key in the data folder: ``identity_key.json``, 0600, made on first start.

The file holds the private key (a JWK) and every rotation statement so far, oldest first:
the card carries those statements, so a caller that pinned an old key can follow, step by
step, each old key's signature over its successor (``internal.signing.rotated_to``).
``butler key rotate`` runs with the daemon stopped (it holds the data folder's lock).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from butler.runtime.clock import now_iso
from butler.storage import private_folder, replace_private
from internal.protocol.a2a.codec.card_signature import AGENT_PARAM, KEY_PARAM, ROTATIONS_PARAM
from internal.protocol.a2a.model import SetupError
from internal.signing import IdentityKey, rotation_statement

KEY_FILE = "identity_key.json"


@dataclass(frozen=True)
class AgentIdentity:
    key: IdentityKey
    rotations: tuple[str, ...] = ()

    @property
    def kid(self) -> str:
        return self.key.kid

    def v2_card_fields(self) -> dict[str, Any]:
        """The same on the Butler /v2 card, which the registry keeps with the name."""
        fields: dict[str, Any] = {"identity_key": self.key.public.jwk}
        if self.rotations:
            fields["key_rotations"] = list(self.rotations)
        return fields

    def card_params(self, agent_id: str) -> dict[str, Any]:
        """What the swarm extension's params on the card say about the key, and the agent
        id its receipts name (a receipt's signer is the agent whose card names its key)."""
        params: dict[str, Any] = {KEY_PARAM: self.key.public.jwk, AGENT_PARAM: agent_id}
        if self.rotations:
            params[ROTATIONS_PARAM] = list(self.rotations)
        return params


def _write(path: Path, identity: AgentIdentity) -> None:
    replace_private(path, json.dumps({
        "key": identity.key.private_jwk, "rotations": list(identity.rotations),
        "updated_at": now_iso()}, indent=2).encode())


def read_identity(data_dir: Path) -> AgentIdentity | None:
    path = data_dir / KEY_FILE
    try:
        raw = json.loads(path.read_bytes())
        key = IdentityKey.from_jwk(raw["key"])
        rotations = tuple(str(r) for r in raw.get("rotations", []))
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise SetupError("bad_identity_key",
                         f"{path}: cannot read the identity key ({exc}); restore it from a "
                         "backup, or remove it to start as a new identity") from None
    return AgentIdentity(key, rotations)


def load_identity(data_dir: Path) -> AgentIdentity:
    """The agent's identity, made (and stored 0600) on first start."""
    found = read_identity(data_dir)
    if found is not None:
        return found
    private_folder(data_dir)
    identity = AgentIdentity(IdentityKey.generate())
    _write(data_dir / KEY_FILE, identity)
    return identity


def rotate_identity(data_dir: Path) -> tuple[AgentIdentity, AgentIdentity]:
    """A new key, signed by the old one: (old, new)."""
    old = load_identity(data_dir)
    fresh = IdentityKey.generate()
    new = AgentIdentity(fresh, (*old.rotations,
                                rotation_statement(old.key, fresh.public, now_iso())))
    _write(data_dir / KEY_FILE, new)
    return old, new
