"""Berth: serve LLMs from a workflow catalog on GPU clusters."""
