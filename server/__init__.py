"""The control plane's API process (`berth server`): REST routes and services over its store (server/store/)."""
