"""The prefix cache and its disk tier, cache profiles, prompt checkpoints."""
