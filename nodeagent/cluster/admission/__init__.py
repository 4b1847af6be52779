"""Admission rules of the cluster API (pure): PriorityClass resolution, ResourceQuota checks, the
LimitRanger's defaults and limits, DefaultTolerationSeconds.

May import: core.
"""
