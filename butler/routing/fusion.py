"""Fusion: the stages' scores of a candidate made one, with what the router knows of
where the candidate comes from.

    fused = prior * weighted mean of the stages that ran + NAMED_BONUS if the task names
            the candidate's peer

Each stage gives a share in 0..1: lexical and n-grams their share of the task's points,
the semantic stage its cosine (negative counts as 0). The weights were chosen on the
evaluation's tuning half (bench/intent_fit.py prints top-1 for the weights in code): a
grid over 0.3-0.7 per stage moved top-1 by under 5 points, these were the best.

The prior is the locality rule (docs/intent.md, "Who wins a tie"): a local skill is what
the operator installed, a configured peer is one it chose, a registry agent is a
stranger whose card says what it likes. So a peer's card must match clearly better than
a local skill to outrank it, and a registry entry better than a configured peer. A peer
as a whole is a little below its own skills: a task that fits one of them goes to it,
and the whole peer wins only what names it and fits none of its skills.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from butler.routing.candidate import RouteCandidate

STAGE_WEIGHTS: dict[str, float] = {"lexical": 0.31, "ngrams": 0.33, "semantic": 0.36}
SOURCE_PRIOR: dict[str, float] = {"local": 1.0, "config": 0.95, "card": 0.95,
                                  "registry": 0.9}
WHOLE_PEER_PRIOR = 0.9
NAMED_BONUS = 0.15


def prior(candidate: RouteCandidate) -> float:
    p = SOURCE_PRIOR.get(candidate.source, SOURCE_PRIOR["registry"])
    return p * WHOLE_PEER_PRIOR if candidate.kind == "peer" else p


def fuse(stages: Mapping[str, Sequence[float]], priors: Sequence[float],
         named: Sequence[bool]) -> list[float]:
    """One score per candidate from each stage's share (``stages``: name -> per
    candidate); only the stages given count, their weights renormalised."""
    total = sum(STAGE_WEIGHTS[s] for s in stages) or 1.0
    a, b, c = (STAGE_WEIGHTS[s] / total if s in stages else 0.0
               for s in ("lexical", "ngrams", "semantic"))
    lexical, ngrams = stages["lexical"], stages["ngrams"]
    semantic = stages.get("semantic") or [0.0] * len(priors)
    # One pass, one expression: this runs for every candidate of every task.
    out = [p * (a * x + b * y + c * z)
           for p, x, y, z in zip(priors, lexical, ngrams, semantic, strict=True)]
    for i, is_named in enumerate(named):
        if is_named:
            out[i] += NAMED_BONUS
    return out
