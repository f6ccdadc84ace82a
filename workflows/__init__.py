"""Temporal workflows: the generic PoolWorkflow and one CopyWorkflow per replica copy (no I/O)."""
