"""Gateway: a package per process (endpoint/, models/, litellm_hooks/: inside LiteLLM's venv) over the edge/ kit."""
