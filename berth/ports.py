"""The embedded stack's default port base, in a module that imports nothing: the CLI shows the default ports
in its help, and `berth --help` should not import berth.settings (pydantic) for them (issue 33). berth.settings
re-exports it, with the ports derived from it (StackPorts)."""

DEFAULT_PORT_BASE = 18230
