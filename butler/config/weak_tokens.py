"""Token hashes nobody should accept: those of common passwords, and those published in
Butler's own examples and docs (anyone can paste them, nobody should keep them).

Only hashes are configured, so a weak token is found by hashing the candidates, not by
reading the token. ``butler check-config`` and ``butler serve`` warn; neither refuses,
so a test setup keeps working.
"""

from __future__ import annotations

import hashlib
import math
import string
from functools import cache

_COMMON = (
    "", "password", "passw0rd", "Password1", "secret", "token", "test", "testing", "admin",
    "root", "changeme", "letmein", "welcome", "qwerty", "abc123", "iloveyou", "dragon",
    "monkey", "master", "hello", "default", "guest", "butler", "home", "office", "me",
    "a2a", "bearer", "123", "1234", "12345", "123456", "1234567", "12345678", "123456789",
    "1234567890", "000000", "111111", "0", "1", "x", "t", "dev", "local", "example",
)

# Hashes that appear in this project's examples, docs and tests as illustrations.
_PUBLISHED = frozenset({
    "4f6f3a6e7c4a2f3b9a0d1e2c3b4a5f6e7d8c9b0a1f2e3d4c5b6a7f8e9d0c1b2a",
    "b5d4045c3f466fa91fe2cc6abe79232a1a57cdf104f7a26e716e0a1e2789df78",
    "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752",
    "fd61a03af4f77d870fc21e05e7e80678095c92d808cfb3b5c279ee04c74aca13",
    "76fd1bcd9fb322e1aa5e87c93f35f3a97f0c6505e993835148b56cd7e4ee7f4c",
    "45b1996d2028cbb899422b6aece0ab2b78c08d142bc1d69607c5d971533c2baf",
    "cec3199ef97ff5e81e91d9fedb8baceeaf9912c6124543afeaeae82269b113c9",
    "dbae64e68b96fe6df2c1cae2c33c967468498387b9fcc1a1080844cd0c9e5683",
})

MIN_TOKEN_BITS = 128


@cache
def _common_hashes() -> dict[str, str]:
    return {hashlib.sha256(word.encode()).hexdigest(): word for word in _COMMON}


def weakness(digest: str) -> str | None:
    """Why the token behind ``digest`` (lowercase hex SHA-256) is unsafe, or None."""
    word = _common_hashes().get(digest)
    if word is not None:
        return f"is the SHA-256 of the well-known weak token {word!r}"
    if digest in _PUBLISHED:
        return "is a hash published in Butler's examples or docs"
    return None


def estimated_bits(token: str) -> float:
    """An upper bound on the token's entropy from its length and alphabet: hex digits
    carry 4 bits each, base64url 6, anything else at most 6.6 (printable ASCII)."""
    if not token:
        return 0.0
    if all(c in string.hexdigits for c in token):
        per_char = 4.0
    elif all(c in string.ascii_letters + string.digits + "-_=+/" for c in token):
        per_char = 6.0
    else:
        per_char = math.log2(95)
    return len(token) * per_char


def token_hash_warnings(digests: list[bytes]) -> list[str]:
    """One line per weak entry of ``configurations.a2a.token_hashes``."""
    out = []
    for i, digest in enumerate(digests):
        why = weakness(digest.hex())
        if why is not None:
            out.append(f"configurations.a2a.token_hashes[{i}]: {why}; anyone could call "
                       "with it: make a token with `butler token new`")
    return out
