"""Key continuity: a token goes to a peer only over a connection opened after the peer's
public card (read without the token) was checked: signed by the key pinned for it, or by
one the pinned key signed over to.

The first signed card seen pins its key (trust on first use), unless the registry entry
the peer was found in named one already. A peer whose card is unsigned is not pinned;
once pinned, an unsigned card or another key is refused with ``peer_identity_changed``.
The pins are ``peer_keys.json`` in the data folder (``PinStore``), 0600, one entry per
peer name (its JWK and when it was pinned).

The card is checked before a call opens a new connection to the peer, not before every
call (``guarded``, and ``connection_check``, the check each transport that sends the
peer its token is built with): a connection reaches one process, and a Butler reads its key only at
start, so a peer that swapped its key is a new process, reached only over new
connections, and is refused before the token is sent. A kept-alive connection is reused
without reading the card. The first call to a peer, and the first after any failure
with it, check the card before anything is sent. A card's signature is checked again
only when the card changed (the same card, byte for byte, verified the same way before).

A card can be replayed by whoever reads it, and a proxy can keep our connection while
the agent behind it changes, so what proves who answered is the answer: a peer with a
pinned key must sign its answer's receipt with it (``answered``), else the answer is
refused (docs/receipts.md).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from butler.delegation.peer_logs import PeerLogs, ReadConsistency
from butler.delegation.peers import Candidate
from butler.identity.receipts import verify_receipt
from butler.runtime.clock import now_iso
from butler.storage import private_folder, replace_private
from internal.http import ConnectionCheck
from internal.protocol.a2a.codec.card_signature import key_rotations, verify_card
from internal.protocol.a2a.model import DelegationFailed, agent_key
from internal.signing import (
    BadSignature,
    PublicKey,
    public_key_from_jwk,
    rotated_to,
)

log = logging.getLogger("butler.delegation")
PINS_FILE = "peer_keys.json"
CardReader = Callable[[], Awaitable[dict[str, Any]]]
T = TypeVar("T")
MAX_CHECKED = 1024


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
        self._write()

    def entry(self, peer: str) -> dict[str, Any] | None:
        return self._pins.get(peer)

    def update(self, peer: str, fields: dict[str, Any]) -> None:
        """Adds ``fields`` (the peer's receipt log's kept head) to a pinned peer's entry."""
        if peer in self._pins:
            self._pins[peer] = {**self._pins[peer], **fields}
            self._write()

    def _write(self) -> None:
        private_folder(self.path.parent)  # `butler delegate` may pin before a first start
        replace_private(self.path, json.dumps(self._pins, indent=2, sort_keys=True).encode())


def changed(cand: Candidate, why: str, *, token_sent: bool = False) -> DelegationFailed:
    sent = "the token went with that call: replace it (butler token new)" if token_sent \
        else "no token was sent"
    return DelegationFailed("peer_identity_changed", f"{cand.name}: {why}; {sent} (if the "
                            f"peer's operator replaced its key on purpose, remove its entry "
                            f"from {PINS_FILE} in the data folder)")


class PeerIdentities:
    def __init__(self, pins: PinStore) -> None:
        self.pins = pins
        self.logs = PeerLogs(pins.entry, pins.update)
        self._verified: dict[str, tuple[str, PublicKey]] = {}  # peer -> (its card, its key)
        # peer -> the card its last check passed (None: it has none), while no call to it
        # has failed since: its kept-alive connections were opened after that check.
        self._checked: dict[str, dict[str, Any] | None] = {}
        # Peers whose card a call checked before it started: the first new connection
        # while that call runs is covered by the check.
        self._covered: set[str] = set()

    def _expected(self, cand: Candidate) -> PublicKey | None:
        pinned = self.pins.get(agent_key(cand.name))
        if pinned is None and cand.identity_key is not None:
            try:
                return public_key_from_jwk(cand.identity_key)
            except BadSignature:
                return None
        return pinned

    async def guarded(self, cand: Candidate, read_card: CardReader,
                      call: Callable[[dict[str, Any] | None], Awaitable[T]]) -> T:
        """``call(card)``, which sends ``cand`` its token over transports built with
        ``connection_check``; a check that fails raises ``peer_identity_changed`` (a
        ``DelegationFailed``) before the connection is made. It pins the key on first
        contact and follows rotations. ``card``: the card last checked (None when the peer
        has none), for the call to pick the interface it sends to. The first call, and the
        first after a failed one, checks the card before it starts; the first connection
        it then opens is covered by that check, as the request after a check always was."""
        name = agent_key(cand.name)
        self.logs.refused(cand, name)
        if name not in self._checked:
            if len(self._checked) >= MAX_CHECKED:  # registry peers come and go
                self._checked.clear()
            self._checked[name] = await self._check(cand, name, read_card)
            self._covered.add(name)
        try:
            return await call(self._checked[name])
        except BaseException:
            self._checked.pop(name, None)
            raise
        finally:
            self._covered.discard(name)

    def connection_check(self, cand: Candidate, read_card: CardReader) -> ConnectionCheck:
        """What a transport that sends ``cand`` its token awaits before it opens a new
        connection (none when it reuses a kept-alive one): the card checked again, unless
        the running call's own check covers it. ``read_card`` reads without the token, on
        a transport built without a check, so a check never sets off another."""
        name = agent_key(cand.name)

        async def before_connecting() -> None:
            if name in self._covered:
                self._covered.discard(name)
                return
            self._checked[name] = await self._check(cand, name, read_card)

        return before_connecting

    async def answered(self, cand: Candidate, receipts: Sequence[str],
                       read_card: CardReader, read_log: ReadConsistency | None = None) -> None:
        """The answer's own receipt (the first) must be signed by the peer's pinned key.
        Signed by another, the card is read again first: the peer may have rotated to it.
        An answer without receipts passes (an agent that is not a Butler signs none).
        Refused, the peer's card is checked again before its next call sends anything.
        Its tree head must extend the one kept for the peer (``PeerLogs``)."""
        name = agent_key(cand.name)
        pinned = self.pins.get(name)
        if pinned is None or not receipts:
            return
        self.logs.refused(cand, name)
        if not _signed_by(receipts[0], pinned):
            self._checked.pop(name, None)
            await self._check(cand, name, read_card, token_sent=True)
            pinned = self.pins.get(name)
            if pinned is None or not _signed_by(receipts[0], pinned):
                raise changed(cand, "its answer's receipt is not signed by its pinned key",
                              token_sent=True)
        if read_log is not None:
            await self.logs.seen(cand, name, receipts[0], read_log)

    async def _check(self, cand: Candidate, name: str, read_card: CardReader, *,
                     token_sent: bool = False) -> dict[str, Any] | None:
        """``token_sent``: a call already sent it (its answer is being judged)."""
        expected = self._expected(cand)
        try:
            card = await read_card()
        except DelegationFailed as err:
            if expected is None and err.code == "peer_error":
                return None  # no card, nothing pinned: an agent that never proved a key
            raise
        if not card.get("signatures"):
            if expected is None:
                return card
            raise changed(cand, f"its card is unsigned, but key {expected.kid} is pinned",
                          token_sent=token_sent)
        try:
            key = self._verify(name, card)
        except BadSignature as exc:
            raise changed(cand, f"its card's signature does not check ({exc})",
                          token_sent=token_sent) from None
        if expected is None or key.kid == expected.kid:
            if self.pins.get(name) is None:
                self.pins.pin(name, key)
            return card
        if rotated_to(expected, key.kid, key_rotations(card)):
            log.info("peer %s rotated its key %s -> %s; pinned the new one", cand.name,
                     expected.kid, key.kid)
            self.pins.pin(name, key)
            return card
        raise changed(cand, f"its card is signed by key {key.kid}, but key {expected.kid} is "
                            "pinned for it and did not sign the change", token_sent=token_sent)

    def _verify(self, name: str, card: dict[str, Any]) -> PublicKey:
        """``verify_card``, remembered for the last card of each peer: checking a
        signature costs more than comparing the card's text with the one checked."""
        text = json.dumps(card, sort_keys=True, separators=(",", ":"), default=str)
        known = self._verified.get(name)
        if known is not None and known[0] == text:
            return known[1]
        key = verify_card(card)
        self._verified[name] = (text, key)
        return key


def _signed_by(receipt: str, key: PublicKey) -> bool:
    try:
        verify_receipt(receipt, key)
    except BadSignature:
        return False
    return True
