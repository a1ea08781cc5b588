"""Every id the gateway mints, from one function.

An id is its kind's prefix followed by random hex digits from a version-4
UUID (32 digits: 122 random bits; fewer when a protocol's ids are shorter).
The prefixes are the protocols' own:

- OpenAI: ``chatcmpl-`` (chat), ``cmpl-`` (completions), ``embd-``
  (embeddings), ``call_`` (tool calls);
- Responses: ``resp_`` (the response), items ``msg_``, ``rs_``, ``fc_``,
  ``ctc_``, ``mcp_``, ``mcpl_``, ``mcpr_``;
- Anthropic: ``msg_`` (the message), ``req_`` (the ``request-id`` header,
  every protocol's error answers too), ``count_`` (token counts),
  ``toolu_`` (tool uses);
- Ollama: ``ollama-``, ``ollama-embd-`` (request ids, never shown);
- mlxd: ``clear-`` (a prefix-cache clear sent to a worker, never shown).

The worker mints tool-call ids of its own (``worker.parsers``); the
gateway keeps or rewrites them (:mod:`gateway.frontend.tool_calls`). Pure;
any thread.
"""

from __future__ import annotations

import uuid


def new_id(prefix: str, digits: int = 32) -> str:
    """A fresh id: ``prefix`` and ``digits`` (at most 32) random hex digits."""
    return prefix + uuid.uuid4().hex[:digits]
