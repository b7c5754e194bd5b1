"""The default thread count is the cores this process may run on (its CPU affinity, as taskset, a
SLURM cpuset or a container leaves it), not the machine's: os.cpu_count() would start a thread for
every core of a 128-core node in a job given 8 of them."""
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# Run in a child pinned to one core, so this test's own process keeps its cores.
CHILD = """
import json, os
os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
import morphgen
from morphgen.library import openmp_wait_env
from morphgen.resources import usable_cores
os.environ.pop("OMP_WAIT_POLICY", None)
print(json.dumps({"cores": usable_cores(), "threads": morphgen.compile("examples/gcn.mp").threads,
                  "one_thread": openmp_wait_env(1), "two_threads": openmp_wait_env(2)}))
"""


def test_default_threads_and_wait_policy_follow_the_cpu_affinity():
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, check=True)
    seen = json.loads(out.stdout)
    assert seen["cores"] == 1
    assert seen["threads"] == 1
    # two threads on the one core left: the workers must sleep between regions, not spin
    assert seen["one_thread"] == {} and seen["two_threads"] == {"OMP_WAIT_POLICY": "PASSIVE"}
