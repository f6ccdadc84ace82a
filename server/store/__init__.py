"""The control plane's SQL store: its tables, the engine and migrations, and one module per resource it keeps."""
