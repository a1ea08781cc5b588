"""mlxd as a launchd service: launchctl, the plist, the service's log files."""
