"""The A2A 1.0 decoder reads the common message and part shapes through a shortcut; for
any input, the shortcut must give what the general reader gives, the same value or the
same error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from internal.protocol.a2a.codec import a2a_v1
from internal.protocol.a2a.model import ButlerError

values = st.none() | st.booleans() | st.integers() | st.text(max_size=4) | st.lists(
    st.text(max_size=3), max_size=2)
ids = st.text(max_size=3) | st.text(min_size=255, max_size=258) | values
texts = st.text(max_size=5) | values
parts = st.lists(
    st.fixed_dictionaries({"text": texts}) | st.dictionaries(
        st.sampled_from(["text", "data", "metadata", "url"]), texts, max_size=2),
    max_size=2) | values
messages = st.fixed_dictionaries(
    {"messageId": ids, "role": st.sampled_from(["ROLE_USER", "ROLE_AGENT", 1]) | values,
     "parts": parts},
    optional={"contextId": ids, "taskId": ids, "metadata": values,
              "extensions": values, "message_id": ids}) | values


def _outcome(read: Callable[[Any, str], Any], raw: Any) -> Any:
    try:
        return read(raw, "message")
    except ButlerError as err:
        return (err.code, err.message)


@given(messages)
def test_the_message_shortcut_reads_what_the_general_reader_reads(raw: Any) -> None:
    assert _outcome(a2a_v1.decode_message, raw) == _outcome(
        a2a_v1._decode_message, raw)


@given(st.fixed_dictionaries({"text": texts}) | st.dictionaries(
    st.sampled_from(["text", "data", "raw"]), texts, max_size=2) | values)
def test_the_text_part_shortcut_reads_what_the_general_reader_reads(raw: Any) -> None:
    assert _outcome(a2a_v1.decode_part, raw) == _outcome(
        a2a_v1._decode_part, raw)
