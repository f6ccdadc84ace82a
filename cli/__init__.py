"""`berth`: a thin typed client of the REST API with Rich output (`-o json` on every listing)."""
