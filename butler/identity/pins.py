"""The peers' identity keys this agent has pinned: ``peer_keys.json`` in the data folder,
0600, one entry per peer name (its JWK and when it was pinned).

A key is pinned on first contact with a peer whose card is signed (or from the registry
entry it was found in); from then on a token goes to that peer only while its card is
signed by the pinned key, or by a key the pinned one has signed over to (a rotation).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from butler.runtime.clock import now_iso
from butler.storage import replace_private
from internal.signing import BadSignature, PublicKey, public_key_from_jwk

PINS_FILE = "peer_keys.json"
log = logging.getLogger("butler.identity")


class PinStore:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._pins: dict[str, dict[str, Any]] = self._read()
        self._keys: dict[str, PublicKey | None] = {}  # each entry's key, read once

    def _read(self) -> dict[str, dict[str, Any]]:
        try:
            raw = json.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except (OSError, ValueError) as exc:
            # Not fatal: every peer is pinned afresh; the file is rewritten on the next pin.
            log.error("cannot read %s (%s): peers' keys are pinned afresh", self.path, exc)
            return {}
        return {k: v for k, v in raw.items() if isinstance(v, dict)} \
            if isinstance(raw, dict) else {}

    def get(self, peer: str) -> PublicKey | None:
        if peer in self._keys:
            return self._keys[peer]
        entry = self._pins.get(peer)
        if entry is None:
            return None
        try:
            key: PublicKey | None = public_key_from_jwk(entry.get("jwk"))
        except BadSignature:
            key = None
        self._keys[peer] = key
        return key

    def pin(self, peer: str, key: PublicKey) -> None:
        self._pins[peer] = {"jwk": key.jwk, "kid": key.kid, "pinned_at": now_iso()}
        self._keys[peer] = key
        replace_private(self.path, json.dumps(self._pins, indent=2, sort_keys=True).encode())
