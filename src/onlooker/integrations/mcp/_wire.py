"""A ``CallToolResult`` on the wire: what the tool said, apart from the envelope the SDK adds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from mcp.server.context import HandlerResult

__all__ = ["SERVER_INFO", "as_wire", "merge_envelope", "split_envelope", "text_of"]

SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"  # mcp_types.SERVER_INFO_META_KEY


def as_wire(result: HandlerResult) -> dict[str, Any]:
    """A handler's result as the client gets it (aliases, JSON values, no ``None`` fields)."""
    if result is None:
        return {}
    if isinstance(result, dict):
        return result
    return result.model_dump(by_alias=True, mode="json", exclude_none=True)


def split_envelope(wire: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The tool's result and the protocol envelope the SDK added (``resultType``, ``serverInfo``)."""
    body = dict(wire)
    envelope: dict[str, Any] = {}
    if "resultType" in body:
        envelope["resultType"] = body.pop("resultType")
    meta = body.get("_meta")
    if isinstance(meta, Mapping) and SERVER_INFO in meta:
        rest = {k: v for k, v in meta.items() if k != SERVER_INFO}
        envelope["_meta"] = {SERVER_INFO: meta[SERVER_INFO]}
        if rest:
            body["_meta"] = rest
        else:
            del body["_meta"]
    return body, envelope


def merge_envelope(body: dict[str, Any], envelope: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with the envelope :func:`split_envelope` took put back (its own ``_meta`` wins)."""
    merged = dict(body)
    if "resultType" in envelope:
        merged.setdefault("resultType", envelope["resultType"])
    stamp = envelope.get("_meta")
    if isinstance(stamp, Mapping):
        meta = merged.get("_meta")
        merged["_meta"] = {**stamp, **meta} if isinstance(meta, Mapping) else dict(stamp)
    return merged


def text_of(body: Mapping[str, Any]) -> str:
    """The text contents of a result, one a line (an error result's message)."""
    content = body.get("content")
    if not isinstance(content, list):
        return ""
    texts = [
        item["text"]
        for item in content
        if isinstance(item, Mapping)
        and item.get("type") == "text"
        and isinstance(item.get("text"), str)
    ]
    return "\n".join(texts)
