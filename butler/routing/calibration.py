"""Calibration: the fused score made into how likely the choice is right.

    confidence = 1 / (1 + exp(-(A + B * fused + C * margin + D * known)))

``fused`` is the candidate's fused score, ``margin`` how far it is ahead of the best
other candidate (negative when behind), ``known`` the share of the task's words that
some card has, as written or spelled alike. A tiny logistic regression, one set of
constants per set of stages that ran (the semantic stage changes what a fused score
means), fitted by ``bench/intent_fit.py`` on the evaluation's tuning half: the label
is 1 when the top candidate is the right one, 0 when it is wrong or the request is one
no agent should take. Re-run that script after changing a stage and paste its output
here.

The threshold (``DEFAULT_THRESHOLD``) is the confidence the best candidate must reach;
it was chosen on the same tuning half as the one that maximises overall accuracy
(right skill, or declined when none fits) while keeping false accepts of out-of-scope
requests at or under 15 %.
"""

from __future__ import annotations

import math

# (A, B, C, D) per stage set; see the module docstring for how they are refitted. Fitted
# on the tuning half of bench/intent (197 requests, 52 candidates).
COEFFICIENTS: dict[frozenset[str], tuple[float, float, float, float]] = {
    frozenset({"lexical", "ngrams"}): (-1.917, 3.587, 4.748, 0.284),
    frozenset({"lexical", "ngrams", "semantic"}): (-1.858, 5.587, 8.705, -1.329),
}
# Chosen on the tuning half: the best was 0.55 with the semantic stage and 0.59 without;
# a confidence means the same with either, so one threshold serves both, the one that
# keeps false accepts under 15 % without the semantic stage.
DEFAULT_THRESHOLD = 0.59
# Two candidates whose confidences are this close are a toss-up: the answer says so.
CLOSE = 0.1


def confidence(stages: frozenset[str], fused: float, margin: float, known: float) -> float:
    a, b, c, d = COEFFICIENTS[stages]
    z = a + b * fused + c * margin + d * known
    return 1.0 / (1.0 + math.exp(-z)) if z > -50 else 0.0
