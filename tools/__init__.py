"""Build-time generators of the documentation site (``make docs``).

Nothing here imports the project's packages (``gateway``, ``worker``,
``shared``) or MLX: everything is read from the source files with
:mod:`ast`, so the docs build on any machine with the docs extra installed.

- :mod:`tools.apimap`: the API inventory (``site/api-inventory.json``) and
  the docstring gate used by ``tests/test_docs.py``.
- :mod:`tools.sourcemap`: the source inventory of ``bench/``, ``tools/``,
  ``deploy/`` and ``tests/`` (``site/source-inventory.json``); both
  inventories use :mod:`tools.state_facts` (state, addressability, nested
  definitions) and :mod:`tools.sourcelinks` (links to exact lines).
- :mod:`tools.llms`: ``site/llms.txt`` and ``site/llms-full.txt``.
- :mod:`tools.mkdocs_hooks`: MkDocs hooks that add one reference page per
  public module and refuse any import of the project's packages or MLX
  during the build.
- :mod:`tools.griffe_roles`: a griffe extension that turns the Sphinx roles
  in docstrings (``:class:`X```) into links or plain code.

``make docs`` runs ``mkdocs build --strict``, then ``python -m tools.apimap
--out site/api-inventory.json``, ``python -m tools.sourcemap --out
site/source-inventory.json`` and ``python -m tools.llms --site site``.
"""
