"""Images of requests: parts to bytes, remote URL fetching and its policy, readiness for the worker."""
