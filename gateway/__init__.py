"""Gateway: the endpoint proxy, the LiteLLM hooks, and the discovering gateway."""
