"""The SIGKILL storm of integration/test_durability.py (KillStorm), bigger, with figures (root).

    .venv/bin/python bench/kill_storm.py [--pods 200] [--kills 50] [--burst 6] [--deletes 2] [--seed N]
    integration/run-in-uml.sh .venv/bin/python bench/kill_storm.py --pods 100 --kills 20   # cgroup v2

The same storm as the CI test (idle, mid-create burst, mid-delete, mid-eviction, in a seeded
random order; every promise checked after each restart, and no pod cgroup or process left at the
end), with more pods and kills. A broken promise does not stop it here: it is printed (BROKEN:
...) and counted, and the exit status is 1. Printed: one line per kill, then the agent's restart
time (start -> /healthz), the time until every held pod is reported Running again by how many
pods it re-adopted, what each eviction kill ran into, and the broken promises by kind. The work
directory (agent log, start files) is kept when a promise broke or the storm failed (--keep:
always).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "integration")]
from agent_proc import pct  # noqa: E402
from eviction_helpers import EvictionAgent, Hogs  # noqa: E402
from test_durability import KillStorm, storm_config, storm_seed  # noqa: E402

from nodeagent.agent.cgroups.detect import make_driver  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--pods", type=int, default=200, help="pods held at the end (default 200)")
    ap.add_argument("--kills", type=int, default=50, help="SIGKILLs, spread evenly over the four situations")
    ap.add_argument("--burst", type=int, default=6, help="concurrent creates in a create burst")
    ap.add_argument("--deletes", type=int, default=2, help="concurrent deletes in a delete burst")
    ap.add_argument("--seed", type=int, default=None, help="the storm's plan (default: NODEAGENT_STORM_SEED or fresh)")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (agent log, start files)")
    args = ap.parse_args()

    version = make_driver("auto", "/nodeagent-bench-probe").version
    seed = args.seed if args.seed is not None else storm_seed()
    work = Path(tempfile.mkdtemp(prefix="kill-storm-"))
    (work / "agent").mkdir()
    agent = EvictionAgent(work / "agent", version, extra_config=storm_config(args.pods))
    print(f"cgroup v{version}; seed {seed}; {args.pods} pods, {args.kills} kills; work dir {work}", flush=True)
    ok = False
    try:
        agent.start()
        storm = KillStorm(agent, work / "runs", Hogs(work / "ctl"), seed=seed, pods=args.pods, kills=args.kills,
                          burst=args.burst, deletes=args.deletes, strict=False,
                          out=lambda line: print(line, flush=True))
        print("plan:", " ".join(storm.plan), f"({storm.initial} pods before the first kill)", flush=True)
        t0 = time.monotonic()
        figures = storm.run()
        took = time.monotonic() - t0
        ok = not figures.broken
    finally:
        try:
            agent.cleanup()
        finally:
            if ok and not args.keep:
                shutil.rmtree(work, ignore_errors=True)
            else:
                print(f"work dir kept: {work} (agent log: {agent.log_path})")

    print()
    print(storm.summary())
    restarts = figures.restarts
    print(f"restart, agent start -> /healthz: p50 {pct(restarts, 0.5):.2f} s, p90 {pct(restarts, 0.9):.2f} s, "
          f"max {max(restarts):.2f} s over {len(restarts)} restarts")
    print("re-adoption, agent start -> every held pod reported Running, by pods held:")
    buckets: dict[int, list[float]] = {}
    for pods, seconds in figures.readopted:
        buckets.setdefault(pods // 25 * 25, []).append(seconds)
    for low in sorted(buckets):
        values = buckets[low]
        print(f"  {low:4d}-{low + 24:<4d} pods: {len(values):3d} restarts, p50 {pct(values, 0.5):.2f} s, "
              f"max {max(values):.2f} s")
    print("eviction kills:", ", ".join(f"{n} {k}" for k, n in sorted(figures.evictions.items())) or "none")
    print(f"storm {took:.1f} s")
    if figures.broken:
        print("BROKEN PROMISES:", ", ".join(f"{n} {k}" for k, n in sorted(figures.broken.items())))
        return 1
    print("every promise held: 0 acknowledged pods lost, 0 deleted pods back, 0 processes started twice, "
          "0 reported evictions undone, 0 pod cgroups left")
    return 0


if __name__ == "__main__":
    sys.exit(main())
