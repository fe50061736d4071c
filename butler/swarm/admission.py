"""Swarm admission: loop, depth, forged callers and budget, decided before any work."""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from decimal import Decimal

from butler.routing import DEFAULT_THRESHOLD
from internal.protocol.a2a.model import AuthError, Envelope, Identity, Refusal, agent_key


@dataclass(frozen=True, slots=True)
class Admitted:
    """The envelope after admission: the chain this task carries and its budget."""

    chain: tuple[str, ...]
    budget_usd: Decimal
    may_delegate: bool  # the next hop (chain + us) is within max_depth
    # The caller's delegation tree, or a new one when this task begins it (a random,
    # unguessable id). The tree's workspace here is keyed by it and the caller.
    tree_id: str = ""

    @property
    def depth(self) -> int:
        return len(self.chain)


@dataclass(frozen=True, slots=True)
class SwarmPolicy:
    agent_id: str
    max_depth: int
    budget_cap_usd: Decimal
    # The score a task in plain words must reach for the intent router to choose (0..1).
    routing_threshold: float = DEFAULT_THRESHOLD

    def admit(self, envelope: Envelope, caller: Identity) -> Admitted:
        chain = envelope.chain
        if caller.bound:
            if not chain:
                # A bound peer is the caller even when it sent no chain.
                chain = (caller.name,)
            elif agent_key(chain[-1]) != agent_key(caller.name):
                raise AuthError(
                    "chain_mismatch",
                    f"token belongs to {caller.name!r} but the chain names {chain[-1]!r} "
                    "as the caller",
                )
        if agent_key(self.agent_id) in {agent_key(hop) for hop in chain}:
            raise Refusal(
                "loop_detected",
                f"{self.agent_id} is already in the caller chain {' -> '.join(chain)}",
                details={"caller_chain": list(chain)},
            )
        if len(chain) > self.max_depth:
            raise Refusal(
                "depth_exceeded",
                f"chain depth {len(chain)} exceeds max_depth {self.max_depth}",
                details={"depth": len(chain), "max_depth": self.max_depth},
            )
        claimed = envelope.budget_usd
        budget = self.budget_cap_usd if claimed is None else min(claimed, self.budget_cap_usd)
        return Admitted(chain=chain, budget_usd=budget, may_delegate=self.can_delegate(chain),
                        tree_id=envelope.tree_id or secrets.token_hex(16))

    def can_delegate(self, chain: tuple[str, ...]) -> bool:
        """Whether the next hop (chain + us) is within depth: we never send a doomed hop."""
        return len(chain) + 1 <= self.max_depth


def require_affordable(cost: Decimal, budget: Decimal, what: str) -> None:
    if cost > budget:
        raise Refusal(
            "budget_exhausted",
            f"{what} costs {cost} USD but only {budget} USD is left",
            details={"cost_usd": str(cost), "budget_left_usd": str(budget)},
        )
