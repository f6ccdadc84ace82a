"""The endpoint proxy's steps, one module each; their order is declared in gateway/endpoint/pipeline.py."""
