"""Berth core: settings, errors, security and process helpers shared by every component."""
