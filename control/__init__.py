"""The control worker (`berth worker`): pool and copy workflows, control-side activities and the autoscaler's loop."""
