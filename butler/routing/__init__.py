"""Intent routing: which skill or peer a task in plain words is for."""

from butler.routing.calibration import DEFAULT_THRESHOLD
from butler.routing.candidate import RouteCandidate
from butler.routing.router import Match, Ranking, RouteIndex, Scored, explain, route

__all__ = ["DEFAULT_THRESHOLD", "Match", "Ranking", "RouteCandidate", "RouteIndex", "Scored",
           "explain", "route"]
