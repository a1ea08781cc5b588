"""Sampling on the scheduler thread: samplers, logits processors, defaults, constrained decoding."""
