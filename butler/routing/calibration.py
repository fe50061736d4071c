"""Calibration: the fused score made into how likely the choice is right.

    confidence = 1 / (1 + exp(-(A + B*fused + C*margin + D*known + E*semantic
                                + F*coverage)))

``fused`` is the candidate's fused score, ``margin`` how far it is ahead of the best
other candidate (negative when behind), ``known`` the share of the task's words that
some card has, as written or spelled alike, ``semantic`` the semantic stage's cosine
for the candidate (0 without the stage), ``coverage`` the share of the task's words
that this candidate's card has (as written or spelled alike). ``semantic`` says how
close the meaning is however few words are shared (a paragraph, a typo); ``coverage``
says how much of the request the card explains: one shared word of six ("order new
running shoes" and an order tracker) is weaker evidence than the fused score alone
suggests.

A tiny logistic regression, one set of constants per set of stages that ran (the
semantic stage changes what a fused score means), fitted by ``bench/intent_fit.py`` on
the evaluation's tuning half: the label is 1 when the top candidate is the right one, 0
when it is wrong or the request is one no agent should take. Re-run that script after
changing a stage and paste its output here.

The threshold (``DEFAULT_THRESHOLD``) is the confidence the best candidate must reach;
it was chosen on the same tuning half as the one that maximises overall accuracy
(right skill, or declined when none fits) while keeping false accepts of out-of-scope
requests at or under 15 % (not the one that minimises false accepts).
"""

from __future__ import annotations

import math

Coefficients = tuple[float, float, float, float, float, float]

# (A, B, C, D, E, F) per stage set; see the module docstring for how they are refitted.
# Fitted on the tuning half of bench/intent (197 requests, 52 candidates). Which features
# each set uses (the others are 0) was chosen by 5-fold cross-validation on that half
# (``bench/intent_fit.py --cv``): with the semantic stage, fused and the semantic cosine
# alone scored as well out of fold as all five (57 % overall against 57 %) with half the
# false accepts (8.5 % against 17 %); margin, known and coverage added nothing they did
# not already say. Without it, fused, margin and known.
COEFFICIENTS: dict[frozenset[str], Coefficients] = {
    frozenset({"lexical", "ngrams"}): (-1.857, 3.761, 3.558, 0.276, 0.0, 0.0),
    frozenset({"lexical", "ngrams", "semantic"}): (-2.829, 3.641, 0.0, 0.0, 5.582, 0.0),
}
# Chosen on the tuning half as the most right answers with false accepts <= 15 %: 0.60
# with the semantic stage (57.9 % overall, 6.8 % false accepts), 0.58 without (52.3 %,
# 11.9 %); one value serves both, the semantic stage's (the test extra installs it).
DEFAULT_THRESHOLD = 0.6
# Two candidates whose confidences are this close are a toss-up: the answer says so.
CLOSE = 0.1


def confidence(stages: frozenset[str], fused: float, margin: float, known: float,
               semantic: float = 0.0, coverage: float = 0.0) -> float:
    a, b, c, d, e, f = COEFFICIENTS[stages]
    z = a + b * fused + c * margin + d * known + e * semantic + f * coverage
    return 1.0 / (1.0 + math.exp(-z)) if z > -50 else 0.0
