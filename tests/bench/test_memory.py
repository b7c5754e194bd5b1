"""The training peak excludes transient peaks from before training (data loading)."""
import subprocess
import sys
import textwrap

MiB = 1 << 20


def test_training_peak_ignores_a_loading_peak_but_sees_training():
    # In a fresh process: a 300 MiB transient before the reset must not count, 150 MiB after must.
    code = textwrap.dedent("""
        import numpy as np
        from morphgen.bench.memory import peak_rss_bytes, start_training_peak
        loading = np.ones(300 << 17); del loading          # 300 MiB of float64, freed
        before = peak_rss_bytes()
        base = start_training_peak()
        training = np.ones(150 << 17); training[:] = 2.0   # 150 MiB, kept until the end
        print(before, base, peak_rss_bytes())
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    before, base, peak = map(int, out.split())
    assert before - base >= 280 * MiB             # the loading transient was in the peak ...
    assert 140 * MiB <= peak - base <= 200 * MiB  # ... and is gone from the training peak
