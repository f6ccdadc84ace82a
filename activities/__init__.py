"""Temporal activities: every I/O the workflows need (placement, processes, downloads, endpoints)."""
