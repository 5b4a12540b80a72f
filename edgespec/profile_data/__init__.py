"""The device profiles edgespec ships: one TOML file per device, read by profiles.store."""
