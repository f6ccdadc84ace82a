"""The model gateway: one OpenAI API over every discoverable pool (`python -m gateway.models.model_gateway`)."""
