"""What runs inside LiteLLM's virtualenv: its auth, its replica sync and routing, its standby."""
