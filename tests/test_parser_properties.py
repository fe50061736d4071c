"""Property tests for the /v2 REST codec: whatever arrives, a parser answers with a
value or a ``RequestError``, never another exception; and what it accepts keeps the
swarm rules (depth = chain length, a budget never above what was claimed)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from internal.protocol.a2a.codec import butler_v2, swarm_envelope
from internal.protocol.a2a.model import (
    Artifact,
    CostNode,
    Part,
    RequestError,
    Task,
    TaskRequest,
    TaskState,
)

# JSON as jsonwire decodes it: numbers are int or Decimal, never float.
scalars = st.none() | st.booleans() | st.integers() | st.text(max_size=20) | st.decimals(
    allow_nan=False, allow_infinity=False)
json_values = st.recursive(
    scalars, lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=10), inner, max_size=4), max_leaves=20)
ids = st.from_regex(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,15}", fullmatch=True)
header_text = st.text(st.characters(codec="latin-1"), max_size=40)
amount_like = st.one_of(
    st.decimals(allow_nan=True, allow_infinity=True).map(str), st.text(max_size=12),
    st.sampled_from(["1_0", "-0", " 1 ", "1e3", "1E-9999999", "\u0661", "\u00b2", "0x10", "NaN"]),
    st.integers().map(str))
REQUEST_KEYS = sorted(butler_v2._REQUEST_KEYS)


@given(st.one_of(json_values, amount_like))
def test_money_is_a_bounded_exact_amount_or_a_refusal(value: Any) -> None:
    try:
        amount = butler_v2.decode_money(value, "budget")
    except RequestError as err:
        assert err.code == "invalid_envelope"
        return
    assert isinstance(amount, Decimal) and amount.is_finite()
    assert 0 <= amount <= butler_v2.MAX_BUDGET


@given(st.decimals(min_value=0, max_value=butler_v2.MAX_BUDGET, allow_nan=False,
                   allow_infinity=False, places=8))
def test_money_round_trips_exactly(amount: Decimal) -> None:
    assert butler_v2.decode_money(str(amount), "budget") == amount
    assert butler_v2.decode_money(amount, "budget") == amount


def headers_strategy() -> st.SearchStrategy[dict[str, str]]:
    chainish = st.lists(ids, max_size=5).map(",".join)
    depthish = st.integers(0, 70).map(str) | st.sampled_from(
        ["\u00b2", "\u0661", " 2 ", "-1", "0" * 40, "0" * 5000])
    return st.fixed_dictionaries({}, optional={
        swarm_envelope.CHAIN_HEADER: chainish | header_text,
        swarm_envelope.DEPTH_HEADER: depthish | header_text,
        swarm_envelope.TRACE_HEADER: st.from_regex(r"[0-9a-f]{32}", fullmatch=True) | header_text,
        swarm_envelope.BUDGET_HEADER: amount_like | header_text,
        "traceparent": header_text, "tracestate": header_text,
    })


def body_strategy() -> st.SearchStrategy[dict[str, Any]]:
    return st.fixed_dictionaries({}, optional={
        "caller_chain": st.one_of(st.lists(ids, max_size=5), json_values),
        "budget": st.one_of(amount_like, json_values),
        "trace_id": st.one_of(st.from_regex(r"[0-9a-f]{32}", fullmatch=True), json_values),
    })


@given(body_strategy(), headers_strategy())
def test_envelope_keeps_the_swarm_rules(body: dict[str, Any], headers: dict[str, str]) -> None:
    try:
        decoded = swarm_envelope.decode_v2_envelope(body, headers)
    except RequestError as err:
        assert err.code in ("invalid_envelope", "invalid_request")
        return
    assert len(decoded.chain) <= swarm_envelope.MAX_CHAIN
    assert all(butler_v2.AGENT_ID.fullmatch(a) for a in decoded.chain)
    if swarm_envelope.DEPTH_HEADER in headers:
        assert int(headers[swarm_envelope.DEPTH_HEADER]) == len(decoded.chain)
    claims = [butler_v2.decode_money(v, "claim") for v in
              (body.get("budget"), headers.get(swarm_envelope.BUDGET_HEADER)) if v is not None]
    if decoded.budget_usd is None:
        assert not claims
    else:
        assert all(decoded.budget_usd <= claim for claim in claims)
    if decoded.trace_id is not None:
        assert len(decoded.trace_id) == 32


@given(st.lists(ids, max_size=swarm_envelope.MAX_CHAIN),
       st.none() | st.decimals(min_value=0, max_value=1000, places=4))
def test_envelope_headers_as_the_client_sends_them_round_trip(
    chain: list[str], budget: Decimal | None
) -> None:
    headers = {swarm_envelope.CHAIN_HEADER: ",".join(chain),
               swarm_envelope.DEPTH_HEADER: str(len(chain))}
    body = butler_v2.encode_request(TaskRequest(text="x"), chain=tuple(chain), budget=budget)
    decoded = swarm_envelope.decode_v2_envelope(body, headers if chain else {})
    assert decoded.chain == tuple(chain)
    assert decoded.budget_usd == budget


@given(st.one_of(json_values, st.dictionaries(st.sampled_from(REQUEST_KEYS), json_values)))
def test_task_request_is_decoded_or_refused(body: Any) -> None:
    try:
        request = butler_v2.decode_task_request(body)
    except RequestError as err:
        assert err.code == "invalid_request"
        return
    assert request.text or request.input or request.parts


def parts_strategy() -> st.SearchStrategy[list[dict[str, Any]]]:
    text = st.builds(lambda t: {"text": t}, st.text(max_size=30))
    data = st.builds(lambda d: {"data": d}, st.dictionaries(st.text(max_size=5), scalars,
                                                             max_size=3))
    return st.lists(text | data, max_size=4)


@given(st.builds(
    dict, task=st.text(max_size=50), mode=st.sampled_from(["blocking", "async"]),
    capabilities_needed=st.lists(ids, max_size=3), parts=parts_strategy(),
    id=ids, timeout_seconds=st.integers(1, 86400)))
def test_task_request_round_trips(body: dict[str, Any]) -> None:
    try:
        request = butler_v2.decode_task_request(body)
    except RequestError:
        assert not body["task"] and not body["parts"]
        return
    again = butler_v2.decode_task_request(butler_v2.encode_request(request))
    assert again == request


@given(st.one_of(json_values, st.lists(st.dictionaries(
    st.sampled_from(["text", "data", "file", "metadata", "kind"]), json_values), max_size=4)))
def test_parts_are_decoded_or_refused(value: Any) -> None:
    try:
        parts = butler_v2.decode_parts(value)
    except RequestError as err:
        assert err.code == "invalid_request"
        return
    assert all(sum(x is not None for x in (p.text, p.data, p.file)) == 1 for p in parts)


TASK_KEYS = ["id", "context_id", "state", "skill", "result", "error", "budget", "swarm",
             "status", "history", "cost", "created_at", "updated_at"]


def peer_task_strategy() -> st.SearchStrategy[Any]:
    """What a peer might answer: anything, but often shaped like a task."""
    nested = st.dictionaries(st.sampled_from(
        ["parts", "artifacts", "caller_chain", "trace_id", "message", "start_usd",
         "spent_usd", "code", "children", "cost_usd", "duration_ms", "state"]), json_values,
        max_size=4)
    field = st.one_of(json_values, nested, st.lists(nested, max_size=3))
    shaped = st.dictionaries(st.sampled_from(TASK_KEYS), field, max_size=8).map(
        lambda d: {"state": "completed", **d})
    return st.one_of(json_values, shaped)


@given(peer_task_strategy())
def test_a_peers_answer_is_a_task_or_a_request_error(value: Any) -> None:
    """A peer's garbage must fail as a RequestError (the client maps it to peer_error)."""
    try:
        task = butler_v2.decode_task(value)
    except RequestError:
        return
    assert isinstance(task, Task)


tasks = st.builds(
    Task, id=ids, context_id=ids, owner=st.just(""), state=st.sampled_from(TaskState),
    request=st.just(TaskRequest()), created_at=st.just("2026-01-01T00:00:00Z"),
    updated_at=st.just("2026-01-01T00:00:01Z"), skill=ids,
    parts=st.lists(st.builds(Part, text=st.text(max_size=20)), max_size=3).map(tuple),
    artifacts=st.lists(st.builds(Artifact, artifact_id=ids, parts=st.just(
        (Part(text="a"),)), name=st.text(max_size=5)), max_size=2).map(tuple),
    cost=st.none() | st.builds(CostNode, agent=ids, skill=ids, cost_usd=st.decimals(
        min_value=0, max_value=10, places=2), duration_ms=st.integers(0, 10**6),
        status=st.just("completed")),
    chain=st.lists(ids, max_size=4).map(tuple), trace_id=st.from_regex(r"[0-9a-f]{32}",
                                                                      fullmatch=True))


@given(tasks)
def test_encoded_tasks_decode_to_the_same_result(task: Task) -> None:
    back = butler_v2.decode_task(butler_v2.encode_task(task))
    assert (back.id, back.state, back.parts, back.artifacts, back.chain, back.trace_id) == (
        task.id, task.state, task.parts, task.artifacts, task.chain, task.trace_id)
    assert back.cost == task.cost
