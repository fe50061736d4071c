"""Deterministic intent routing: which skill or peer a task in plain words is for."""

from butler.routing.router import (
    DEFAULT_THRESHOLD,
    Match,
    Ranking,
    RouteCandidate,
    RouteIndex,
    Scored,
    explain,
    route,
)

__all__ = ["DEFAULT_THRESHOLD", "Match", "Ranking", "RouteCandidate", "RouteIndex", "Scored",
           "explain", "route"]
