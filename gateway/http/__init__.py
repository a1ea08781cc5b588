"""HTTP plumbing around the app: middleware (Host check, CORS, keys, body cap), the head guard, the open-file limit."""
