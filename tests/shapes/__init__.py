"""Every response a test gateway sends, checked against the official types.

* :mod:`tests.shapes.recorder`: the ASGI middleware recording each response
  (test gateways only; :mod:`tests.shapes.serve` puts it into the gateway
  processes the fixtures start).
* :mod:`tests.shapes.plugin`: reads the records after each test and checks them.
* :mod:`tests.shapes.routes`: which official type each route answers with.
* :mod:`tests.shapes.official`: the strict check of one object against one type.
* :mod:`tests.shapes.frames`: SSE and NDJSON bodies split into events.
* :mod:`tests.shapes.required_fields_gen`: regenerates ``required_fields.json``
  when the pinned SDKs are bumped.
"""
