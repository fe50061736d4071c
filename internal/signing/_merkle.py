"""A Merkle tree as Certificate Transparency defines it (RFC 9162, section 2.1): leaf
hashes ``SHA-256(0x00 || leaf)``, node hashes ``SHA-256(0x01 || left || right)``, the
tree over ``n`` leaves split at the largest power of two below ``n``.

What is stored is every *perfect* subtree's hash: node ``(level, index)`` covers leaves
``[index * 2**level, (index + 1) * 2**level)``. A tree of any size is the fold of at most
log2(n) such nodes, so a root, an inclusion proof or a consistency proof reads O(log n)
nodes (``NodeReader``), however large the log. Appending a leaf writes its hash and the
perfect nodes it completes (``appended_nodes``).

Verification (``verify_inclusion``, ``verify_consistency``) follows RFC 9162's
algorithms 2.1.3.2 and 2.1.4.2 step by step, so a proof made here is checked the way any
other implementation checks it; both only raise ``BadProof``.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence

from internal.signing._eddsa import BadSignature

# (level, index) -> the hash of that perfect subtree
NodeReader = Callable[[int, int], bytes]
MAX_PROOF = 64  # hashes in one proof: a tree of 2**64 leaves needs fewer


class BadProof(BadSignature):
    """A proof that does not fold to the root it is checked against, or is malformed."""


def leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


EMPTY_ROOT = hashlib.sha256(b"").digest()


def appended_nodes(index: int, leaf: bytes, read: NodeReader) -> list[tuple[int, int, bytes]]:
    """The nodes to store when ``leaf`` becomes leaf ``index``: its hash, and each perfect
    subtree it completes (their left halves are read back)."""
    node = leaf_hash(leaf)
    nodes = [(0, index, node)]
    level, i = 0, index
    while i % 2 == 1:
        node = node_hash(read(level, i - 1), node)
        level, i = level + 1, i // 2
        nodes.append((level, i, node))
    return nodes


def subtree_root(start: int, end: int, read: NodeReader) -> bytes:
    """MTH(D[start:end]) for ``start`` a multiple of the split RFC 9162 makes (every range
    a proof needs is): the perfect subtrees it is made of, folded right to left."""
    if end <= start:
        return EMPTY_ROOT
    size = end - start
    if size & (size - 1) == 0 and start % size == 0:
        return read(size.bit_length() - 1, start // size)
    split = 1 << ((size - 1).bit_length() - 1)  # the largest power of two below size
    return node_hash(subtree_root(start, start + split, read),
                     subtree_root(start + split, end, read))


def root(size: int, read: NodeReader) -> bytes:
    return subtree_root(0, size, read)


def inclusion_proof(index: int, size: int, read: NodeReader) -> list[bytes]:
    """PATH(index, D[0:size]) (RFC 9162, 2.1.3.1), leaf side first."""
    if not 0 <= index < size:
        raise BadProof(f"leaf {index} is not in a tree of {size}")
    return _path(index, 0, size, read)


def _path(m: int, start: int, end: int, read: NodeReader) -> list[bytes]:
    n = end - start
    if n <= 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return [*_path(m, start, start + k, read), subtree_root(start + k, end, read)]
    return [*_path(m - k, start + k, end, read), subtree_root(start, start + k, read)]


def consistency_proof(old: int, new: int, read: NodeReader) -> list[bytes]:
    """PROOF(old, D[0:new]) (RFC 9162, 2.1.4.1)."""
    if not 0 < old <= new:
        raise BadProof(f"no consistency proof from {old} to {new}")
    return _subproof(old, 0, new, True, read)


def _subproof(m: int, start: int, end: int, whole: bool, read: NodeReader) -> list[bytes]:
    n = end - start
    if m == n:
        return [] if whole else [subtree_root(start, end, read)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return [*_subproof(m, start, start + k, whole, read), subtree_root(start + k, end, read)]
    return [*_subproof(m - k, start + k, end, False, read), subtree_root(start, start + k, read)]


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[bytes],
                     expected_root: bytes) -> None:
    """RFC 9162, 2.1.3.2: raises ``BadProof`` unless ``proof`` folds ``leaf`` at
    ``index`` to ``expected_root`` of a tree of ``size``."""
    if not 0 <= index < size or len(proof) > MAX_PROOF:
        raise BadProof(f"leaf {index} cannot be in a tree of {size}")
    fn, sn = index, size - 1
    r = leaf_hash(leaf)
    for p in proof:
        if sn == 0:
            raise BadProof("the inclusion proof is longer than the tree is deep")
        if fn % 2 == 1 or fn == sn:
            r = node_hash(p, r)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            r = node_hash(r, p)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise BadProof("the inclusion proof is shorter than the tree is deep")
    if r != expected_root:
        raise BadProof("the inclusion proof does not fold to the signed root")


def verify_consistency(old: int, new: int, old_root: bytes, new_root: bytes,
                       proof: Sequence[bytes]) -> None:
    """RFC 9162, 2.1.4.2: raises ``BadProof`` unless the tree of ``new`` leaves with
    ``new_root`` extends the tree of ``old`` leaves with ``old_root``."""
    if not 0 < old <= new or len(proof) > MAX_PROOF:
        raise BadProof(f"sizes {old} -> {new} cannot be consistent")
    if old == new:
        if proof or old_root != new_root:
            raise BadProof("two heads of the same size differ: the log forked")
        return
    path = list(proof)
    if old & (old - 1) == 0:  # a power of two: the old root is the first node of the path
        path.insert(0, old_root)
    if not path:
        raise BadProof("empty consistency proof")
    fn, sn = old - 1, new - 1
    while fn % 2 == 1:
        fn, sn = fn >> 1, sn >> 1
    fr = sr = path[0]
    for c in path[1:]:
        if sn == 0:
            raise BadProof("the consistency proof is too long")
        if fn % 2 == 1 or fn == sn:
            fr, sr = node_hash(c, fr), node_hash(c, sr)
            if fn % 2 == 0:
                while fn % 2 == 0 and fn != 0:
                    fn, sn = fn >> 1, sn >> 1
        else:
            sr = node_hash(sr, c)
        fn, sn = fn >> 1, sn >> 1
    if sn != 0:
        raise BadProof("the consistency proof is too short")
    if fr != old_root:
        raise BadProof("the log does not extend the head seen before: it forked")
    if sr != new_root:
        raise BadProof("the consistency proof does not fold to the new root: the new head "
                       "does not extend the old one")
