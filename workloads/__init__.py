"""Workload definitions and the code of in-tree workloads (the probe)."""
