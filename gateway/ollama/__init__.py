"""The Ollama-compatible front-end (``/api/...`` and ``/``)."""
