"""The node agent (`berth node`): reports inventory and runs rank and service processes."""
