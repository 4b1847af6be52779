"""Admission rules of the cluster API (pure): PriorityClass resolution and ResourceQuota checks.

May import: core.
"""
