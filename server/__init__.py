"""The control plane: REST API (`berth server`), its SQL store and the placement scheduler."""
