"""The parts of the OpenAPI document that no protocol front-end owns.

Each protocol package describes its own routes in its ``openapi`` module,
built with the front-ends' toolkit (:mod:`gateway.frontend.openapi`).
Belongs here what cannot live that way: the Operations routes
(:mod:`~gateway.openapi.operations`: health, readiness, metrics, the
dashboard's and the control routes, whose packages may not import the
toolkit), and the schema views the component schemas are generated from
(:mod:`~gateway.openapi.schema_views`). :mod:`gateway.openapi_document`
assembles every part into the document.

Imports: :mod:`gateway.core`, :mod:`gateway.frontend`,
:mod:`gateway.workers` (a worker's status, as ``/health`` reports it),
:mod:`gateway.dashboard`, :mod:`gateway.control` (the Structs of their
answers) and :mod:`shared`; never a front-end. Builds plain data; runs
wherever the document is built (a worker thread of the gateway).
"""
