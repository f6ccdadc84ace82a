"""The endpoint proxy: the process every endpoint's requests pass through (`python -m gateway.endpoint.run`)."""
