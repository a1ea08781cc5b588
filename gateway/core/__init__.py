"""The gateway's core: client-facing errors and the backend interface front-ends use to reach the workers."""
