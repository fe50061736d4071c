"""A task's signed receipts as its row keeps them (docs/tasks.md#storage).

A receipt is a compact JWS, ``protected.payload.signature`` in base64url, and most of it
repeats what the row already holds: the protected header is the same for every receipt
one key signs, and most claims are the task's own (its id, state, cost, budget, trace
id, time and result digest). So a row keeps a receipt as ``[signer, id, signature,
digest, changed]``: ``signer`` numbers its header in ``receipt_signers`` (with the agent
and url first seen with it), ``id`` is its receipt id's hex, and ``changed`` holds the
claims that differ from those rebuilt from the task (a peer's receipt: its own task,
cost and digest). Where they give their text back exactly, the id and signature (80
bytes written as 120 characters) are kept as bytes after the row's JSON body
(``task_row``) and the receipt as ``[signer, changed]``. Reading rebuilds the claims,
their RFC 8785 form and the JWS, byte for byte. A receipt is kept that way only if
rebuilding it when it is written gives exactly its text back; any other (an unknown
signer, a payload in another form) is kept as the text it is.

The result digest is rebuilt from the stored result, as every other claim is rebuilt
from the task: a result edited on disk then gives a receipt whose signature fails
``butler receipt verify``, as an edited cost or state does. Rows of the layout before
(schema 4) keep each digest with the id and signature (``_PACKED_WITH_DIGEST``).
"""

from __future__ import annotations

import base64
import json
import re
import sqlite3
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from json.encoder import encode_basestring
from typing import Any

from butler.identity.receipts import sealed, task_digest
from internal.protocol.a2a.codec.jcs import canonical
from internal.protocol.a2a.model import Budget, CostNode, Task, TaskState
from internal.signing import b64url, unb64url

SIGNERS_TABLE = """
CREATE TABLE IF NOT EXISTS receipt_signers (
    ref INTEGER PRIMARY KEY,
    protected TEXT NOT NULL UNIQUE,
    agent TEXT NOT NULL,
    url TEXT NOT NULL
)"""

# Signers one file records at most; receipts of any further one are kept as text.
MAX_SIGNERS = 4096
_RECEIPT_ID = re.compile(r"r-([0-9a-f]{32})")
_DIGEST = "sha256:"
_FAST = re.compile(rb'"digest":"sha256:([A-Za-z0-9_-]{43})".*"receipt_id":"r-([0-9a-f]{32})"')


@dataclass(frozen=True, slots=True)
class Signer:
    ref: int
    protected: str  # the JWS's first part, as signed
    agent: str
    url: str


def task_claims(wire_id: str, state: TaskState, cost: CostNode | None,
                budget: Budget | None, trace_id: str, at: str,
                digest: str | None = None) -> dict[str, Any]:
    """The claims a receipt of a task rebuilds from it, as ``receipts.seal`` signs them;
    where a receipt's differ, the row keeps the signed ones. ``digest``: its result's
    (``receipts.parts_digest``); None for a row of the layout before, which keeps it."""
    claims: dict[str, Any] = {
        "task_id": wire_id,
        "state": state.value,
        "cost_usd": str(cost.cost_usd) if cost is not None else "0",
        "total_usd": str(cost.total_usd) if cost is not None else "0",
        "spent_usd": str(budget.spent_usd) if budget is not None else "0",
        "budget_left_usd": str(budget.left_usd) if budget is not None else "0",
        "trace_id": trace_id,
        "children": [],
        "at": at,
    }
    if digest is not None:
        claims["digest"] = digest
    return claims


def claims_of(task: Task) -> dict[str, Any]:
    return task_claims(task.wire_id, task.state, task.cost, task.budget, task.trace_id,
                       task.updated_at, task_digest(task))


class Signers:
    """The receipt signers one ``tasks.db`` knows: read when it opens, added to (in their
    own transaction, before the row that needs them) by ``register``."""

    def __init__(self, signers: Iterable[Signer] = ()) -> None:
        self._by_header: dict[str, Signer] = {}
        self._by_ref: dict[int, Signer] = {}
        self._unusable: set[str] = set()  # headers not recorded: not tried again
        self.add(signers)

    @classmethod
    def load(cls, conn: sqlite3.Connection) -> Signers:
        return cls(Signer(*row) for row in conn.execute(
            "SELECT ref, protected, agent, url FROM receipt_signers"))

    def add(self, signers: Iterable[Signer], looked_at: Iterable[str] = ()) -> None:
        """``signers`` as committed; ``looked_at``: receipts whose signer could not be
        recorded, not to be tried again (while there are not too many of them)."""
        for signer in signers:
            self._by_header[signer.protected] = signer
            self._by_ref[signer.ref] = signer
        if len(self._unusable) > MAX_SIGNERS:
            self._unusable.clear()
        self._unusable.update(jws.partition(".")[0] for jws in looked_at
                              if jws.partition(".")[0] not in self._by_header)

    def unknown(self, receipts: Sequence[str]) -> list[str]:
        return [jws for jws in receipts if isinstance(jws, str)
                and (header := jws.partition(".")[0]) not in self._by_header
                and header not in self._unusable]

    @staticmethod
    def register(conn: sqlite3.Connection, receipts: Sequence[str]) -> list[Signer]:
        """Inside a transaction: the signers of ``receipts``, numbered (new ones added,
        up to ``MAX_SIGNERS`` in a file: a peer cannot grow it without bound). The caller
        ``add``s them once it committed."""
        found: list[Signer] = []
        room = MAX_SIGNERS - conn.execute("SELECT count(*) FROM receipt_signers").fetchone()[0]
        for jws in receipts:
            protected, claims = _split(jws)
            if claims is None:
                continue
            known = conn.execute("SELECT ref, protected, agent, url FROM receipt_signers "
                                 "WHERE protected=?", (protected,)).fetchone()
            if known is not None:
                found.append(Signer(*known))
                continue
            if room <= 0:
                continue
            room -= 1
            agent, url = claims.get("agent"), claims.get("url")
            conn.execute("INSERT INTO receipt_signers(protected, agent, url) "
                         "VALUES (?,?,?)", (protected, agent if isinstance(agent, str) else "",
                                            url if isinstance(url, str) else ""))
            found.append(Signer(*conn.execute(
                "SELECT ref, protected, agent, url FROM receipt_signers WHERE protected=?",
                (protected,)).fetchone()))
        return found

    def stored(self, receipts: Sequence[str], task: Task) -> tuple[list[Any], bytes]:
        """``receipts`` as the row keeps them, each compact where that gives it back, and
        the binary fields of those kept as ``[signer]`` (``_packed``), in order."""
        claims: dict[str, Any] | None = None
        out: list[Any] = []
        binary = bytearray()
        for jws in receipts:
            signer = self._by_header.get(jws.partition(".")[0]) if isinstance(jws, str) \
                else None
            if signer is None:
                out.append(jws)
                continue
            if (packed := _as_sealed(jws, task, signer)) is not None:
                out.append([signer.ref])
                binary += packed
                continue
            if claims is None:
                claims = claims_of(task)
            stored = self._compact(jws, signer, claims)
            packed = _packed(stored) if isinstance(stored, list) else None
            if packed is not None:
                binary += packed
                stored = [stored[0], *stored[4:]]
            out.append(stored)
        return out, bytes(binary)

    def rebuilt(self, stored: Sequence[Any], claims: Callable[[], dict[str, Any]],
                binary: bytes = b"", *, with_digest: bool = False) -> tuple[str, ...]:
        """The receipts a row keeps (``stored``, ``binary``), as they were signed;
        ``claims`` gives its task's (``task_claims``). ``with_digest``: a row of the
        layout before, whose ``binary`` holds each digest too (``_PACKED_WITH_DIGEST``)."""
        base = claims() if any(isinstance(s, list) for s in stored) else {}
        out: list[str] = []
        size = _PACKED_WITH_DIGEST if with_digest else _PACKED
        at = 0
        for s in stored:
            if isinstance(s, str):
                out.append(s)
                continue
            if len(s) <= 2:  # its id and signature (and digest) are in ``binary``
                s = [s[0], *_unpacked(binary[at:at + size], size), *s[1:]]
                at += size
            out.append(self._jws(s, base))
        return tuple(out)

    def _compact(self, jws: str, signer: Signer, base: dict[str, Any]) -> Any:
        parts = jws.split(".")
        if len(parts) != 3:
            return jws
        _, payload, signature = parts
        try:
            signed_bytes = base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4))
        except ValueError:
            return jws
        fast = _FAST.search(signed_bytes)
        if fast is not None and _DIGEST + fast.group(1).decode() == base["digest"]:
            # the common case: no claim but those the task gives
            stored: list[Any] = [signer.ref, fast.group(2).decode(), signature, ""]
            try:
                if self._jws(stored, base) == jws:
                    return stored
            except ValueError:  # a text of the task's that has no UTF-8 form
                return jws
        _, signed = _split(jws)
        if signed is None:
            return jws
        expected = {**base, "agent": signer.agent, "url": signer.url}
        if any(key not in signed for key in expected):
            return jws
        rid_text = signed.get("receipt_id")
        match = _RECEIPT_ID.fullmatch(rid_text) if isinstance(rid_text, str) else None
        # A digest that is not its task's result's (a peer's receipt) is a changed claim.
        changed = {key: value for key, value in signed.items()
                   if (key != "receipt_id" or match is None)
                   and (key not in expected or expected[key] != value)}
        if not all(map(_round_trips, changed.values())):
            return jws
        stored = [signer.ref, match.group(1) if match else "", signature, ""]
        if changed:
            stored.append(changed)
        try:
            again = self._jws(stored, base)
        except ValueError:  # NotCanonical: a value RFC 8785 has no form for
            return jws
        return stored if again == jws else jws

    def _jws(self, stored: list[Any], base: dict[str, Any]) -> str:
        signer = self._by_ref.get(stored[0])
        if signer is None:
            raise ValueError(f"receipt signer {stored[0]} is not in receipt_signers")
        claims = {**base, "agent": signer.agent, "url": signer.url}
        if stored[1]:
            claims["receipt_id"] = "r-" + stored[1]
        if stored[3]:
            claims["digest"] = _DIGEST + stored[3]
        if len(stored) > 4:
            claims.update(stored[4])
        return f"{signer.protected}.{b64url(_canonical(claims))}.{stored[2]}"


def _as_sealed(jws: str, task: Task, signer: Signer) -> bytes | None:
    """The packed id and signature of a receipt ``seal`` just made of this very task
    (the same object: a frozen one, so every claim rebuilt from it is the one signed),
    when its signer's agent and url are the ones it signed and it has no children."""
    made = sealed(jws)
    if made is None or made.task is not task or len(task.receipts) != 1 \
            or made.agent != signer.agent or made.url != signer.url:
        return None
    return bytes.fromhex(made.receipt_id[2:]) + unb64url(made.signature)


def _canonical(claims: dict[str, Any]) -> bytes:
    """RFC 8785 of ``claims``: spelled out when every value is text or a list of texts
    and every key ASCII (what a Butler's receipt holds), with the escapes ``canonical``
    itself uses; else ``canonical``."""
    out = []
    for key in sorted(claims):
        value = claims[key]
        if type(value) is str:
            text = encode_basestring(value)
        elif type(value) is list and all(type(v) is str for v in value):
            text = "[" + ",".join(map(encode_basestring, value)) + "]"
        else:
            return canonical(claims)
        if not key.isascii():
            return canonical(claims)
        out.append(f"{encode_basestring(key)}:{text}")
    return ("{" + ",".join(out) + "}").encode()


_PACKED = 16 + 64  # receipt id, signature
_PACKED_WITH_DIGEST = 16 + 32 + 64  # receipt id, result digest, signature: schema 4 rows


def _packed(stored: list[Any]) -> bytes | None:
    """A compact receipt's id (hex) and signature (base64url) as their bytes, when each
    gives its text back exactly and its digest is its task's; else None (the row keeps
    the text)."""
    _, rid, signature, digest = stored[:4]
    if digest:
        return None
    try:
        raw = (bytes.fromhex(rid), unb64url(signature))
    except ValueError:  # BadSignature too
        return None
    if [len(r) for r in raw] != [16, 64] or raw[0].hex() != rid \
            or b64url(raw[1]) != signature:
        return None
    return b"".join(raw)


def _unpacked(packed: bytes, size: int) -> tuple[str, str, str]:
    """(receipt id hex, signature, digest or ""): ``_packed`` undone."""
    if len(packed) != size:
        raise ValueError("a task row's receipt fields are cut short")
    if size == _PACKED:
        return packed[:16].hex(), b64url(packed[16:]), ""
    return packed[:16].hex(), b64url(packed[48:]), b64url(packed[16:48])


def _split(jws: Any) -> tuple[str, dict[str, Any] | None]:
    """(protected header, claims) of a JWS; claims None when it has no JSON object."""
    parts = jws.split(".") if isinstance(jws, str) else []
    if len(parts) != 3:
        return "", None
    try:
        claims = json.loads(unb64url(parts[1]))
    except (ValueError, RecursionError):  # BadSignature, UnicodeDecodeError, JSONDecodeError
        return parts[0], None
    return parts[0], claims if isinstance(claims, dict) else None


def _round_trips(value: Any) -> bool:
    """Whether the row's JSON gives ``value`` back as it is: text (no lone surrogate) or
    a list of texts, which is what a Butler's receipts hold."""
    if isinstance(value, list):
        return all(map(_round_trips, value))
    if not isinstance(value, str):
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
