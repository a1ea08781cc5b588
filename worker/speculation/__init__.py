"""Speculative decoding: drafting (prompt lookup, a draft model), verification, rollback."""
