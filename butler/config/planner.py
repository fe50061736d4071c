"""``planner:``: the OpenAI-compatible endpoint the LLM planner calls (docs/intent.md)."""

from __future__ import annotations

from pathlib import Path

from butler.config import model as m
from butler.config.common import secret, url
from butler.config.node import Node

_KEYS = {
    "url", "model", "token_env", "token_file", "price_per_1k_input_usd",
    "price_per_1k_output_usd", "max_steps", "max_tokens", "timeout_seconds",
    "connect_timeout_seconds", "stream", "max_response_bytes", "when", "shortlist",
}


def parse_planner(node: Node | None, base: Path) -> m.PlannerConfig | None:
    if node is None or node.value is None:
        return None
    k = node.mapping(_KEYS)
    for required in ("url", "model"):
        if required not in k:
            node.fail(f"the planner needs {required}")
    d = m.PlannerConfig(url="", model="")
    return m.PlannerConfig(
        url=url(k["url"]),
        model=k["model"].string(max_len=256),
        # Optional: a local Ollama or llama.cpp server takes no token.
        token=secret(k, base),
        price_per_1k_input_usd=k["price_per_1k_input_usd"].money()
        if "price_per_1k_input_usd" in k else d.price_per_1k_input_usd,
        price_per_1k_output_usd=k["price_per_1k_output_usd"].money()
        if "price_per_1k_output_usd" in k else d.price_per_1k_output_usd,
        max_steps=k["max_steps"].integer(minimum=1, maximum=100) if "max_steps" in k
        else d.max_steps,
        max_tokens=k["max_tokens"].integer(minimum=1, maximum=1_000_000)
        if "max_tokens" in k else d.max_tokens,
        timeout_seconds=k["timeout_seconds"].number(minimum=0.01)
        if "timeout_seconds" in k else d.timeout_seconds,
        connect_timeout_seconds=k["connect_timeout_seconds"].number(minimum=0.01)
        if "connect_timeout_seconds" in k else d.connect_timeout_seconds,
        stream=k["stream"].boolean() if "stream" in k else d.stream,
        max_response_bytes=k["max_response_bytes"].integer(minimum=1024)
        if "max_response_bytes" in k else d.max_response_bytes,
        when=k["when"].choice(("never", "unsure")) if "when" in k else d.when,
        shortlist=k["shortlist"].integer(minimum=1, maximum=128) if "shortlist" in k
        else d.shortlist,
    )
