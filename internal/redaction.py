"""Secrets out of text that others wrote: a remote endpoint may quote back part of the
token it was sent (an error saying ``invalid key sk-abc123...``), and that text goes on
into a task's error, the audit trail and the log.

``Redactor`` removes from a text every run of at least ``MIN_FRAGMENT`` characters that
also occurs in one of the secrets, however little of the secret it is: the text is
scanned once for every ``MIN_FRAGMENT``-character piece of every secret (one regular
expression, so in C), and the stretches those pieces cover become ``MARK``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MIN_FRAGMENT = 8
MARK = "[token]"


class Redactor:
    def __init__(self, secrets: Iterable[str]) -> None:
        pieces = {secret[i:i + MIN_FRAGMENT] for secret in secrets
                  for i in range(len(secret) - MIN_FRAGMENT + 1)}
        # A lookahead finds every position a piece starts at, overlapping ones included.
        self._pieces = re.compile("(?=(" + "|".join(
            re.escape(p) for p in sorted(pieces)) + "))") if pieces else None

    def __bool__(self) -> bool:
        return self._pieces is not None

    def __call__(self, text: str) -> str:
        if self._pieces is None or len(text) < MIN_FRAGMENT:
            return text
        out: list[str] = []
        kept = 0  # text[:kept] is dealt with
        end = -1  # where the stretch being covered ends
        for found in self._pieces.finditer(text):
            start = found.start()
            if start > end:  # a new stretch
                if end >= 0:
                    out.append(MARK)
                out.append(text[kept:start])
            end = max(end, start + MIN_FRAGMENT)
            kept = end
        if end < 0:
            return text
        out.append(MARK)
        out.append(text[kept:])
        return "".join(out)
