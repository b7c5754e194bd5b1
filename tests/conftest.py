"""Settings for every test process."""
import os

# `make test` runs several test processes on the same cores, each with its own OpenMP team and
# MPI ranks: workers that spin between parallel regions would hold cores the others need (the
# library leaves libgomp's brief spin on by default, `morphgen.library.openmp_wait_env`).  Set
# before any library loads libgomp, which reads it once.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
