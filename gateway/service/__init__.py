"""mlxd as a per-user launchd service on macOS.

Belongs here: launchctl (install, uninstall, status:
:mod:`~gateway.service.launchd`), the agent's plist
(:mod:`~gateway.service.plist`) and the service's log files
(:mod:`~gateway.service.logs`).

Imports: :mod:`shared` only. Runs in the ``mlxd`` command's process, never
in the server.
"""
