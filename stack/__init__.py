"""The embedded stack: `berth up` on one machine (embedded.py, components.py, supervisor.py, waits.py,
state.py) and the driver that tests, the demo and the benchmarks run it with (driver.py). A composition
root: it may import every package; of the product only cli imports it."""
