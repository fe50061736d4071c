"""Reading the Prometheus text format back, strictly enough to catch a malformed line."""

from __future__ import annotations

import re

Sample = tuple[str, frozenset[tuple[str, str]]]

_LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"(?:,|$)')


def parse(text: str) -> dict[Sample, float]:
    """Each sample by (name, labels); raises on any line that is not a comment or sample."""
    samples: dict[Sample, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        match = _LINE.match(line)
        assert match is not None, f"not a sample: {line!r}"
        name, labels, value = match.groups()
        pairs = _LABEL.findall(labels or "")
        assert ",".join(f'{k}="{v}"' for k, v in pairs) == (labels or ""), line
        key = (name, frozenset(pairs))
        assert key not in samples, f"duplicate sample: {line!r}"
        samples[key] = float(value)
    return samples


def value(samples: dict[Sample, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def histogram(samples: dict[Sample, float], name: str,
              **labels: str) -> tuple[list[tuple[float, float]], float, float]:
    """(le, cumulative count) pairs in order, the sum and the count of one label set."""
    buckets = []
    for (sample, pairs), number in samples.items():
        got = dict(pairs)
        le = got.pop("le", None)
        if sample == f"{name}_bucket" and got == labels and le is not None:
            buckets.append((float(le), number))
    buckets.sort()
    return buckets, value(samples, f"{name}_sum", **labels), value(samples, f"{name}_count",
                                                                    **labels)
