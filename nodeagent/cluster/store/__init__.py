"""The scheduler's store on disk: the SchedulerStore protocol, SQLite behind it, and its writer process.

May import: core.
"""
