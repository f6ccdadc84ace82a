"""The edge kit: what the endpoint proxy, the model gateway, the LiteLLM-side hooks and the control worker share."""
