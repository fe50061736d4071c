"""A peer's receipt log must only grow: the latest tree head seen from each peer is kept
beside its pinned key, and a newer one is checked to extend it (a consistency proof the
peer serves, ``/v2/log/consistency``); a peer whose log forked is refused from then on
with ``peer_log_forked``, until its operator's fix is acknowledged by removing its entry
from ``peer_keys.json`` (docs/receipts.md).

A head is checked when it is newer than the one kept, at most once per ``CHECK_SECONDS``
per peer and one check at a time: between checks, answers are taken on their own proof
(each receipt is in its own head), and the next check goes from the last head checked to
the newest, which covers every leaf in between. A head of the same size with another
root is a fork at once. A peer that cannot answer the check is checked at its next
answer; the delegation itself does not fail for it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from butler.delegation.peers import Candidate
from butler.identity.receipts import HEAD_TYPE, parse_logged
from internal.protocol.a2a.model import ButlerError, DelegationFailed
from internal.signing import BadSignature, b64url, jws_claims, merkle, unb64url

log = logging.getLogger("butler.delegation")
CHECK_SECONDS = 10.0
# (from size, to size) -> the peer's answer to GET /v2/log/consistency
ReadConsistency = Callable[[int, int], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Head:
    """A peer's signed tree head, as kept: its size and root."""

    size: int
    root: bytes

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "root": b64url(self.root)}


def forked(cand: Candidate, why: str) -> DelegationFailed:
    return DelegationFailed("peer_log_forked", f"{cand.name}: its receipt log forked ({why}); "
                            "its receipts cannot be trusted until its operator explains, "
                            "then remove its entry from peer_keys.json in the data folder")


def head_of(receipt: str) -> Head | None:
    """The tree head a (verified) logged receipt is under; None for a per-task one."""
    if not receipt.startswith("{"):
        return None
    claims = jws_claims(parse_logged(receipt).head, HEAD_TYPE)
    return Head(int(claims["size"]), unb64url(str(claims["root"])))


class PeerLogs:
    """Kept heads, by peer key, read from and written to the pin store's entries."""

    def __init__(self, entries: Callable[[str], dict[str, Any] | None],
                 save: Callable[[str, dict[str, Any]], None]) -> None:
        self._entry, self._save = entries, save
        self._checked_at: dict[str, float] = {}
        self._checking: set[str] = set()

    def refused(self, cand: Candidate, name: str) -> None:
        entry = self._entry(name) or {}
        if isinstance(entry.get("log_forked"), str):
            raise forked(cand, entry["log_forked"])

    async def seen(self, cand: Candidate, name: str, receipt: str,
                   read: ReadConsistency) -> None:
        """``receipt``: the peer's answer's own, already verified under its pinned key."""
        try:
            head = head_of(receipt)
        except (BadSignature, KeyError, ValueError):
            return  # verified already: a per-task receipt, or a head without a log
        if head is None:
            return
        entry = self._entry(name) or {}
        kept = _kept(entry)
        if kept is None:
            self._keep(name, head)
            return
        if head.size == kept.size and head.root != kept.root:
            self._fork(cand, name, f"two heads of size {head.size} with different roots")
        now = time.monotonic()
        if head.size <= kept.size or name in self._checking or \
                now - self._checked_at.get(name, -CHECK_SECONDS) < CHECK_SECONDS:
            return
        self._checking.add(name)
        try:
            answer = await read(kept.size, head.size)
            proof = [unb64url(p) for p in answer["proof"]]
            merkle.verify_consistency(kept.size, head.size, kept.root, head.root, proof)
        except merkle.BadProof as exc:
            self._fork(cand, name, str(exc))
        except (ButlerError, BadSignature, KeyError, TypeError, ValueError) as exc:
            log.warning("peer %s: its receipt log could not be checked (%s); it is checked "
                        "at its next answer", cand.name, exc)
            return
        finally:
            self._checking.discard(name)
        self._checked_at[name] = now
        self._keep(name, head)

    def _keep(self, name: str, head: Head) -> None:
        self._save(name, {"log_head": head.to_json()})

    def _fork(self, cand: Candidate, name: str, why: str) -> None:
        log.error("peer %s: its receipt log forked: %s; refused until its entry is removed "
                  "from peer_keys.json", cand.name, why)
        self._save(name, {"log_forked": why})
        raise forked(cand, why)


def _kept(entry: dict[str, Any]) -> Head | None:
    found = entry.get("log_head")
    if not isinstance(found, dict):
        return None
    try:
        return Head(int(found["size"]), unb64url(str(found["root"])))
    except (KeyError, TypeError, ValueError, BadSignature):
        return None
