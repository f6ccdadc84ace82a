"""The workflow catalog: entries as data (entry.yaml + workflow.yaml.j2) and the code that renders
and validates them into typed workflow definitions."""
