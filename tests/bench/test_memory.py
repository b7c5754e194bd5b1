"""Memory growth during training is measured from a clean baseline once the data is loaded."""
import subprocess
import sys
import textwrap

MiB = 1 << 20


def _run(code: str) -> list:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                         check=True).stdout
    return [int(v) for v in out.split()]


def test_training_peak_ignores_a_loading_peak_but_sees_training():
    # A 300 MiB transient before the reset must not count, 150 MiB after it must.
    before, base, peak = _run("""
        import numpy as np
        from morphgen.bench.memory import peak_rss_bytes, start_training_peak
        loading = np.ones(300 << 17); del loading          # 300 MiB of float64, freed
        before = peak_rss_bytes()
        base = start_training_peak()
        training = np.ones(150 << 17); training[:] = 2.0   # 150 MiB, kept until the end
        print(before, base, peak_rss_bytes())
    """)
    assert before - base >= 280 * MiB             # the loading transient was in the peak ...
    # ... and is gone from the training peak, which still holds training's 150 MiB (a peak that
    # kept the transient would be at least 300 MiB above the baseline)
    assert 140 * MiB <= peak - base < 280 * MiB


def test_baseline_does_not_hold_memory_the_loader_freed():
    # 320 MiB of small heap blocks freed except the topmost: glibc keeps the pages unless trimmed,
    # and training would then reuse them without any growth showing.
    start, base = _run("""
        import numpy as np
        from morphgen.bench.memory import current_rss_bytes, start_training_peak
        start = current_rss_bytes()
        blocks = [np.ones(1000) for _ in range(40000)]
        last = blocks[-1]; del blocks
        print(start, start_training_peak())
    """)
    assert base - start < 60 * MiB


def test_a_child_does_not_inherit_its_parents_peak():
    # Linux carries the parent's resident set at fork into the child's ru_maxrss across execve;
    # the peak morphgen reports (VmHWM) is the child's own.
    child = _run("""
        import numpy as np, subprocess, sys
        held = np.ones(400 << 17); held[:] = 1.0        # the parent holds 400 MiB while it forks
        code = "from morphgen.bench.memory import peak_rss_bytes; print(peak_rss_bytes())"
        print(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout)
    """)[0]
    assert child < 200 * MiB
