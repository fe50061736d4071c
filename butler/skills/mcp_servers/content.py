"""A2A parts as MCP content blocks and back: the one mapping both bridges use, an MCP
server's answer becoming a task's parts (``to_parts``) and a task's parts becoming an MCP
host's answer (``to_content``). The table is in docs/mcp.md#what-maps.

Where MCP says more than a part holds (an embedded resource's URI, a resource link's
title), the part's metadata carries it under ``MCP_META``, so a tool's answer that goes
through Butler to an MCP host comes out as it went in.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import Any

from mcp.types import (
    AudioContent,
    BlobResourceContents,
    ContentBlock,
    EmbeddedResource,
    ImageContent,
    ResourceLink,
    TextContent,
    TextResourceContents,
)

from internal.protocol.a2a.model import Part

# Part metadata key: what an MCP block was, where its part alone cannot say.
MCP_META = "butler/mcp"
# The largest image, audio clip or blob sent inline to an MCP host (decoded bytes); a
# larger one becomes a text block saying what was left out.
MAX_INLINE_BYTES = 2 * 1024 * 1024
_LINK_FIELDS = ("title", "description", "size")
# The protocol versions that brought structured content and resource links, and audio.
STRUCTURED_SINCE = "2025-06-18"
AUDIO_SINCE = "2025-03-26"


def to_parts(blocks: Iterable[ContentBlock],
             structured: dict[str, Any] | None) -> tuple[list[Part], int]:
    """A tool's answer as parts, and their size in bytes (text, base64, JSON). The JSON
    text a tool repeats its structured content in (as the spec asks) is dropped: the data
    part carries it."""
    parts: list[Part] = []
    size = 0
    for block in blocks:
        if isinstance(block, TextContent):
            if structured is not None and _same_json(block.text, structured):
                continue
            part = Part(text=block.text)
            size += len(block.text.encode())
        elif isinstance(block, ImageContent | AudioContent):
            part = Part(file={"bytes": block.data, "mimeType": block.mime_type})
            size += len(block.data)
        elif isinstance(block, ResourceLink):
            extra = {k: v for k in _LINK_FIELDS if (v := getattr(block, k)) is not None}
            part = Part(file={"uri": block.uri, "name": block.name,
                              **({"mimeType": block.mime_type} if block.mime_type else {})},
                        metadata={MCP_META: {"type": "resource_link", **extra}} if extra
                        else None)
        else:  # an embedded resource: its URI rides in the metadata
            res = block.resource
            about = {"type": "resource", "uri": res.uri,
                     **({"mimeType": res.mime_type} if res.mime_type else {})}
            if isinstance(res, TextResourceContents):
                part = Part(text=res.text, metadata={MCP_META: about})
                size += len(res.text.encode())
            else:
                part = Part(file={"bytes": res.blob, "name": _last_segment(res.uri),
                                  **({"mimeType": res.mime_type} if res.mime_type else {})},
                            metadata={MCP_META: about})
                size += len(res.blob)
        parts.append(part)
    if structured is not None:
        parts.append(Part(data=structured))
        size += len(json.dumps(structured, default=str).encode())
    return parts, size


def to_content(parts: Sequence[Part], where: str, version: str = ""
               ) -> tuple[list[ContentBlock], dict[str, Any] | None]:
    """A task's parts as an MCP answer: its content blocks, and its structured answer
    (the data part, when it has exactly one). ``where`` names the task, for a blob without
    a URI of its own and for what was too large to inline. ``version``, the session's
    protocol version ("" the newest), gets no block it has no word for: resource links
    came in 2025-06-18 (with structured content: ``structured_content_in``), audio in
    2025-03-26."""
    content: list[ContentBlock] = []
    data = [p.data for p in parts if p.data is not None]
    for n, part in enumerate(parts):
        uri = f"{where}/parts/{n}"
        block = _block(part, uri)
        if version and version < STRUCTURED_SINCE and isinstance(block, ResourceLink):
            block = TextContent(text=f"[{block.name}: {block.uri}]")
        if version and version < AUDIO_SINCE and isinstance(block, AudioContent):
            block = EmbeddedResource(resource=BlobResourceContents(
                uri=uri, blob=block.data, mime_type=block.mime_type))
        content.append(block)
    return content, data[0] if len(data) == 1 else None


def structured_content_in(version: str) -> bool:
    """Whether a session of this protocol version ("" the newest) takes
    ``structuredContent``; before it, the JSON text blocks carry the data alone."""
    return not version or version >= STRUCTURED_SINCE


def _block(part: Part, uri: str) -> ContentBlock:
    about = (part.metadata or {}).get(MCP_META)
    about = about if isinstance(about, dict) else {}
    if part.text is not None:
        if about.get("type") == "resource" and isinstance(about.get("uri"), str):
            return EmbeddedResource(resource=TextResourceContents(
                uri=about["uri"], text=part.text, mime_type=_text(about.get("mimeType"))))
        return TextContent(text=part.text)
    if part.data is not None:
        return TextContent(text=json.dumps(part.data, default=str))
    return _file_block(part, about, uri)


def _file_block(part: Part, about: dict[str, Any], uri: str) -> ContentBlock:
    file = part.file or {}
    media = part.media_type
    name = _text(file.get("name")) or ""
    raw = file.get("bytes")
    if not isinstance(raw, str):  # by URL: a link, never fetched
        link = _text(file.get("uri")) or ""
        extra = {k: about[k] for k in _LINK_FIELDS if k in about}
        return ResourceLink(uri=link, name=name or _last_segment(link) or "file",
                            mime_type=None if media == "application/octet-stream" else media,
                            **extra)
    size = len(raw) * 3 // 4
    if size > MAX_INLINE_BYTES:
        return TextContent(text=f"[{name or 'a file'} ({media}, about {size} bytes) is not "
                                f"inlined: larger than {MAX_INLINE_BYTES} bytes]")
    kind = media.split("/", 1)[0]
    if about.get("type") != "resource" and kind == "image":
        return ImageContent(data=raw, mime_type=media)
    if about.get("type") != "resource" and kind == "audio":
        return AudioContent(data=raw, mime_type=media)
    return EmbeddedResource(resource=BlobResourceContents(
        uri=_text(about.get("uri")) or _text(file.get("uri")) or uri, blob=raw,
        mime_type=media))


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _last_segment(uri: str) -> str:
    return uri.rstrip("/").rsplit("/", 1)[-1]


def _same_json(text: str, data: dict[str, Any]) -> bool:
    try:
        return bool(json.loads(text) == data)
    except ValueError:
        return False
