"""RFC 9162 Merkle trees: the stored-node form agrees with the RFC's definitions over lists,
every proof verifies, and every tampered proof is refused with ``BadProof``."""

from __future__ import annotations

import hashlib

import pytest

from internal.signing import merkle

BadProof = merkle.BadProof


def mth(leaves: list[bytes]) -> bytes:  # RFC 9162, 2.1.1, as written
    n = len(leaves)
    if n == 0:
        return hashlib.sha256(b"").digest()
    if n == 1:
        return merkle.leaf_hash(leaves[0])
    k = 1 << ((n - 1).bit_length() - 1)
    return merkle.node_hash(mth(leaves[:k]), mth(leaves[k:]))


def path(m: int, leaves: list[bytes]) -> list[bytes]:  # 2.1.3.1
    n = len(leaves)
    if n <= 1:
        return []
    k = 1 << ((n - 1).bit_length() - 1)
    if m < k:
        return [*path(m, leaves[:k]), mth(leaves[k:])]
    return [*path(m - k, leaves[k:]), mth(leaves[:k])]


def subproof(m: int, leaves: list[bytes], whole: bool) -> list[bytes]:  # 2.1.4.1
    n = len(leaves)
    if m == n:
        return [] if whole else [mth(leaves)]
    k = 1 << ((n - 1).bit_length() - 1)
    if m <= k:
        return [*subproof(m, leaves[:k], whole), mth(leaves[k:])]
    return [*subproof(m - k, leaves[k:], False), mth(leaves[:k])]


class Nodes(dict[tuple[int, int], bytes]):
    def read(self, level: int, index: int) -> bytes:
        return self[(level, index)]

    def append(self, index: int, leaf: bytes) -> None:
        for level, i, h in merkle.appended_nodes(index, leaf, self.read):
            self[(level, i)] = h


LEAVES = [f"leaf {i}".encode() for i in range(37)]


@pytest.fixture(scope="module")
def nodes() -> Nodes:
    store = Nodes()
    for i, leaf in enumerate(LEAVES):
        store.append(i, leaf)
    return store


def test_roots_and_proofs_match_the_rfc_definitions(nodes: Nodes) -> None:
    for n in range(1, len(LEAVES) + 1):
        assert merkle.root(n, nodes.read) == mth(LEAVES[:n])
        for m in range(n):
            assert merkle.inclusion_proof(m, n, nodes.read) == path(m, LEAVES[:n])
            if m:
                assert merkle.consistency_proof(m, n, nodes.read) == subproof(m, LEAVES[:n], True)
    assert merkle.root(0, nodes.read) == merkle.EMPTY_ROOT


def test_every_proof_verifies(nodes: Nodes) -> None:
    for n in range(1, len(LEAVES) + 1):
        root = merkle.root(n, nodes.read)
        for m in range(n):
            merkle.verify_inclusion(LEAVES[m], m, n, merkle.inclusion_proof(m, n, nodes.read), root)
            if m:
                old = merkle.root(m, nodes.read)
                proof = merkle.consistency_proof(m, n, nodes.read)
                merkle.verify_consistency(m, n, old, root, proof)


def test_tampered_inclusion_proofs_are_refused(nodes: Nodes) -> None:
    n, m = 37, 20
    root = merkle.root(n, nodes.read)
    proof = merkle.inclusion_proof(m, n, nodes.read)
    cases = [
        (b"another leaf", m, n, proof, root),
        (LEAVES[m], m + 1, n, proof, root),
        (LEAVES[m], m, n, proof[:-1], root),
        (LEAVES[m], m, n, [*proof, proof[0]], root),
        (LEAVES[m], m, n, [bytes(32), *proof[1:]], root),
        (LEAVES[m], m, n, proof, bytes(32)),
        (LEAVES[m], -1, n, proof, root),
        (LEAVES[m], m, n, [bytes(32)] * 65, root),
    ]
    for leaf, index, size, bad, expected in cases:
        with pytest.raises(BadProof):
            merkle.verify_inclusion(leaf, index, size, bad, expected)


def test_a_forked_log_fails_consistency(nodes: Nodes) -> None:
    forked = Nodes()
    for i, leaf in enumerate(LEAVES):
        forked.append(i, b"rewritten" if i == 5 else leaf)
    old, new = 12, 37
    old_root = merkle.root(old, nodes.read)
    honest = merkle.consistency_proof(old, new, nodes.read)
    with pytest.raises(BadProof, match="forked"):  # the fork's proof cannot reach the old root
        merkle.verify_consistency(old, new, old_root, merkle.root(new, forked.read),
                                  merkle.consistency_proof(old, new, forked.read))
    with pytest.raises(BadProof):
        merkle.verify_consistency(old, new, old_root, merkle.root(new, forked.read), honest)
    with pytest.raises(BadProof):  # sizes going backwards
        merkle.verify_consistency(new, old, merkle.root(new, nodes.read), old_root, honest)
    with pytest.raises(BadProof, match="forked"):
        merkle.verify_consistency(old, old, old_root, merkle.root(old, forked.read), [])
    with pytest.raises(BadProof):
        merkle.verify_consistency(old, new, old_root, merkle.root(new, nodes.read), honest[:-1])
