"""Temporal workflows: the generic ServiceWorkflow and one CopyWorkflow per replica copy (no I/O)."""
