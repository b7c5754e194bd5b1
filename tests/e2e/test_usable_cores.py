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


def test_a_cgroup_cpu_quota_caps_the_cores(tmp_path, monkeypatch):
    """docker --cpus / a Kubernetes CPU limit leave every core in the affinity but a quota of
    CPU time per period: threads beyond the quota would be throttled as a group."""
    import os
    from morphgen import resources
    affinity = len(os.sched_getaffinity(0))
    monkeypatch.setattr(resources, "PROC_CGROUP", str(tmp_path / "self_cgroup"))
    monkeypatch.setattr(resources, "CGROUP_ROOT", str(tmp_path / "cg"))
    (tmp_path / "self_cgroup").write_text("0::/job.slice\n")
    group = tmp_path / "cg" / "job.slice"
    group.mkdir(parents=True)
    (group / "cpu.max").write_text("max 100000\n")
    assert resources.usable_cores() == affinity
    (group / "cpu.max").write_text("150000 100000\n")            # 1.5 cores: rounded down
    assert resources.usable_cores() == 1
    (group / "cpu.max").write_text(f"{(affinity + 3) * 100000} 100000\n")   # above the affinity
    assert resources.usable_cores() == affinity
    (tmp_path / "self_cgroup").write_text("0::/\n4:cpu,cpuacct:/job\n")    # cgroup v1 (hybrid)
    v1 = tmp_path / "cg" / "cpu" / "job"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_period_us").write_text("100000\n")
    (v1 / "cpu.cfs_quota_us").write_text("-1\n")
    assert resources.usable_cores() == affinity
    (v1 / "cpu.cfs_quota_us").write_text("50000\n")              # half a core: still one thread
    assert resources.usable_cores() == 1
