"""Finding and loading models: sources, GGUF conversion, weight digests, ``prepare``."""
