"""cgroups: the CgroupDriver protocol, its v2 (cgroupfs files) and v1 (cgroupspy) drivers, the
pure kubepods layout (paths and specs for QoS tiers, pods and containers), and detection.

May import: core, and node (nothing else of the agent).
"""
