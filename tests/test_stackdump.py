"""SIGUSR1 dumps every thread's stack (even with the loop blocked) and every asyncio task's."""

from __future__ import annotations

import subprocess
import sys
import textwrap

CHILD = textwrap.dedent("""
    import asyncio, os, signal, time
    from nodeagent.daemonkit import stackdump
    from nodeagent.daemonkit.logsetup import configure_logging

    configure_logging("info", "json")
    stackdump.install_thread_dump()
    os.kill(os.getpid(), signal.SIGUSR1)  # before any loop: threads only, and the process lives

    async def parked_for_the_dump():
        await asyncio.sleep(3600)

    async def main():
        stackdump.install(asyncio.get_running_loop())
        task = asyncio.create_task(parked_for_the_dump(), name="parked")
        await asyncio.sleep(0)
        os.kill(os.getpid(), signal.SIGUSR1)
        await asyncio.sleep(0.2)
        task.cancel()

        def blocked_loop():
            os.kill(os.getpid(), signal.SIGUSR1)
            time.sleep(0.2)
        blocked_loop()  # the C handler dumps the threads while the loop cannot run

    asyncio.run(main())
    print("alive")
""")


def test_sigusr1_dumps_threads_before_and_during_the_loop_and_tasks_on_it() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().endswith("alive")
    assert out.stderr.count("Current thread") == 3, out.stderr  # one dump per signal
    assert "blocked_loop" in out.stderr, out.stderr
    assert '"asyncio_task_stack"' in out.stderr and "parked_for_the_dump" in out.stderr, out.stderr
