"""The toolkit the protocol front-ends share: request flow, the answer driver, error shapes, SSE, validation, tool calls."""
