"""`morphgen slurm MODEL.mp --nodes N --ntasks-per-node R ...`: write a SLURM batch script.

The script is generated, never submitted: it runs `morphgen train` with the same options, through
the MPI backend (one rank per SLURM task, `--ranks $SLURM_NTASKS`) or the OpenMP backend (one
process). Every path in it is absolute and shell-quoted, so the job does not depend on the
directory it is submitted from, except its log (`--output`), which SLURM writes relative to it.
"""
from __future__ import annotations

import os
import re
import shlex
import sys
from pathlib import Path

from . import __version__, arg_types
from .errors import UserError

TEMPLATE = Path(__file__).with_name("slurm_job.sbatch.j2")
BACKENDS = ("mpi", "openmp")
# [days-]hours:minutes:seconds, the form SLURM prints and the one users meet in sacct
_TIME = re.compile(r"^(\d+-)?\d+:[0-5]\d:[0-5]\d$")
# #SBATCH lines are read by sbatch, not by a shell: no quoting there, so no blanks or quotes either
_SBATCH_WORD = re.compile(r"^[A-Za-z0-9._%@+=,/-]+$")
# How long before its time limit a job that saves checkpoints is asked to stop (sbatch --signal's @).
DEFAULT_SAVE_BEFORE = 120
# The largest warning sbatch --signal accepts, in seconds.
MAX_SAVE_BEFORE = 65535
# The dataset suffixes morphgen reads as files (morphgen.data.resolve): those are paths, not names.
_DATA_SUFFIXES = (".npz", ".txt", ".edges", ".el", ".tsv", ".csv", ".edgelist")


def add_arguments(p) -> None:
    """The options of `morphgen slurm` (the subparser itself is made in morphgen.cli)."""
    p.add_argument("model", help="the .mp program")
    job = p.add_argument_group("job")
    job.add_argument("--nodes", type=int, required=True, help="nodes to allocate (#SBATCH --nodes)")
    job.add_argument("--ntasks-per-node", type=int, required=True,
                     help="MPI ranks per node (#SBATCH --ntasks-per-node); 1 with --backend openmp")
    job.add_argument("--threads", type=int, default=1,
                     help="OpenMP threads per rank: --cpus-per-task and OMP_NUM_THREADS (default 1)")
    job.add_argument("--time", default="01:00:00", help="wall-clock limit [D-]HH:MM:SS (default %(default)s)")
    job.add_argument("--partition", default=None, help="SLURM partition (default: the cluster's default)")
    job.add_argument("--job-name", default=None, help="job name (default: the program's file name stem)")
    job.add_argument("--log", default="slurm-%j.out",
                     help="the job's output file, relative to the submission directory unless absolute "
                          "(#SBATCH --output; default %(default)s)")
    job.add_argument("-o", "--output", default=None, metavar="SCRIPT",
                     help="where to write the script (default: MODEL-stem.sbatch in this directory)")
    job.add_argument("--force", action="store_true", help="overwrite an existing script")
    train = p.add_argument_group("training (passed to `morphgen train`)")
    train.add_argument("--backend", default="mpi", choices=BACKENDS, help="default mpi")
    train.add_argument("--dataset", default="synthetic", help="dataset name or path (default: %(default)s)")
    train.add_argument("--data-dir", default=None, help="where dataset names are looked up")
    train.add_argument("--epochs", type=int, default=None, help="override the program's epoch count")
    train.add_argument("--seed", type=arg_types.seed, default=None,
                       help="seed (default 0; with --resume, the checkpoint's)")
    train.add_argument("--json", dest="json_out", default=None, help="the run's metrics as JSON")
    train.add_argument("--predictions", default=None, metavar="FILE",
                       help="every node's logits and predicted class as .npz, written when training ends")
    train.add_argument("--until-epoch", type=int, default=None, metavar="N",
                       help="instead of --epochs: train until N epochs in all, counting the resumed checkpoint's")
    train.add_argument("--checkpoint", default=None,
                       help="save parameters and optimizer state here at the end, and when the job nears its "
                            "--time limit (--save-before)")
    train.add_argument("--checkpoint-every", type=int, default=None, metavar="N",
                       help="with --checkpoint: save there after every N epochs as well, so that a job killed "
                            "(a node failure) resumes from its last one")
    train.add_argument("--save-before", type=int, default=DEFAULT_SAVE_BEFORE, metavar="SECONDS",
                       help="with --checkpoint: SLURM signals the job this long before its --time limit "
                            "(#SBATCH --signal=B:USR1@SECONDS), and morphgen finishes its epoch, saves the "
                            "checkpoint and stops; give it an epoch and a save at least (default %(default)s)")
    train.add_argument("--requeue", action="store_true",
                       help="with --checkpoint: a job stopped at its time limit requeues itself and resumes "
                            "from the checkpoint, until training is done (#SBATCH --requeue)")
    train.add_argument("--resume", default=None,
                       help="start from this checkpoint (without --epochs: train the rest of the program's epochs)")
    train.add_argument("--parts-dir", default=None,
                       help="where the per-rank part files are written once and reused (--backend mpi; "
                            "must be visible from every node)")


def run(args) -> int:
    target = Path(args.output) if args.output else Path(f"{Path(args.model).stem}.sbatch")
    text = render(args)
    if target.is_dir():
        raise UserError(f"morphgen: error: -o {target} is a directory; give a file name")
    if target.exists() and not args.force:
        raise UserError(f"morphgen: error: {target} exists; pass --force to overwrite it or -o to write elsewhere")
    try:
        target.write_text(text)
        target.chmod(0o755)
    except OSError as exc:
        raise UserError(f"morphgen: error: cannot write {target}: {exc.strerror or exc}") from None
    print(f"morphgen: wrote {target}: {args.nodes} node(s) x {args.ntasks_per_node} task(s) x "
          f"{args.threads} thread(s), backend {args.backend}; submit with: sbatch {shlex.quote(str(target))}")
    return 0


def render(args) -> str:
    """The job script's text for parsed `args` (raises UserError on a bad combination)."""
    _validate(args)
    import jinja2
    bin_dir = Path(os.path.abspath(sys.executable)).parent   # not resolved: a venv's python is a link
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATE.parent)),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    return env.get_template(TEMPLATE.name).render(
        version=__version__,
        job_name=args.job_name or Path(args.model).stem, nodes=args.nodes,
        ntasks_per_node=args.ntasks_per_node, threads=args.threads, time=args.time,
        partition=args.partition, log=args.log, backend=args.backend,
        checkpoint=args.checkpoint and shlex.quote(_absolute(args.checkpoint)), save_before=args.save_before,
        requeue=args.requeue, first_resume=f"--resume {shlex.quote(_absolute(args.resume))}" if args.resume else "",
        bin_dir=shlex.quote(str(bin_dir)), command=_train_command(args, bin_dir),
        output_folders=" ".join(shlex.quote(f) for f in _output_folders(args)))


def _output_folders(args) -> list:
    """The folders the run's --json, --checkpoint and --predictions go to: created by the job
    when it starts, since `morphgen train` refuses a missing one and they need not exist where
    the script is written (the login node)."""
    files = [f for f in (args.json_out, args.checkpoint, args.predictions) if f]
    return sorted({str(Path(_absolute(f)).parent) for f in files})


def _validate(args) -> None:
    for flag, value in (("--nodes", args.nodes), ("--ntasks-per-node", args.ntasks_per_node),
                        ("--threads", args.threads)):
        if value < 1:
            raise UserError(f"morphgen: error: {flag} must be at least 1, got {value}")
    from .commands import check_checkpoint_every, check_epoch_counts
    check_epoch_counts(args)
    check_checkpoint_every(args)
    if not _TIME.match(args.time):
        raise UserError(f"morphgen: error: --time {args.time!r}: expected [D-]HH:MM:SS, e.g. 02:30:00")
    _validate_stopping(args)
    for flag, value in (("--job-name", args.job_name), ("--partition", args.partition), ("--log", args.log)):
        if value is not None and not _SBATCH_WORD.match(value):
            raise UserError(f"morphgen: error: {flag} {value!r}: use letters, digits and . _ - / % @ + = , only "
                            f"(sbatch reads #SBATCH lines without shell quoting)")
    if args.job_name is None and not _SBATCH_WORD.match(Path(args.model).stem):
        raise UserError(f"morphgen: error: the program's name {Path(args.model).stem!r} is no valid job name; "
                        f"pass --job-name")
    if args.backend == "openmp":
        if args.nodes * args.ntasks_per_node != 1:
            raise UserError(f"morphgen: error: --backend openmp runs one process on one node, but "
                            f"--nodes {args.nodes} --ntasks-per-node {args.ntasks_per_node} asks for "
                            f"{args.nodes * args.ntasks_per_node} tasks: use --nodes 1 --ntasks-per-node 1 "
                            f"(and --threads for the cores), or --backend mpi")
        if args.parts_dir is not None:
            raise UserError("morphgen: error: --parts-dir needs --backend mpi (the OpenMP backend does not partition)")
    if not Path(args.model).is_file():
        raise UserError(f"morphgen: error: {args.model}: no such program file")
    _validate_files(args)


def _validate_stopping(args) -> None:
    """--save-before fits in the job's time; --requeue has a checkpoint to resume from and knows
    where training ends."""
    limit = _seconds(args.time)
    if not 1 <= args.save_before <= MAX_SAVE_BEFORE:
        raise UserError(f"morphgen: error: --save-before must be 1 to {MAX_SAVE_BEFORE} seconds, got {args.save_before}")
    if args.checkpoint and args.save_before >= limit:
        raise UserError(f"morphgen: error: --save-before {args.save_before} is not shorter than the job's --time "
                        f"{args.time} ({limit} s): the job would be asked to stop before it starts")
    if args.requeue and not args.checkpoint:
        raise UserError("morphgen: error: --requeue needs --checkpoint FILE, the file a requeued job resumes from")
    if args.requeue and args.resume and args.epochs is not None:
        raise UserError("morphgen: error: --requeue with --resume: give --until-epoch N (the count to reach, "
                        "counting the checkpoint's) instead of --epochs, which a requeued job would count again")


def _seconds(time_limit: str) -> int:
    """[D-]HH:MM:SS in seconds."""
    days, _, clock = time_limit.rpartition("-")
    hours, minutes, seconds = (int(x) for x in clock.split(":"))
    return ((int(days or 0) * 24 + hours) * 60 + minutes) * 60 + seconds


def _validate_files(args) -> None:
    """What the job will read and write, checked now rather than when the job runs: the dataset
    spec, and outputs that would destroy an input, a file morphgen did not write, or each other."""
    from .data.resolve import dataset_file
    from .data.synthetic import check_synthetic_spec, is_synthetic_spec
    from .outputs import check_distinct, check_output_file, is_checkpoint, is_report
    from .predictions import is_predictions
    if is_synthetic_spec(args.dataset):
        check_synthetic_spec(args.dataset)
    inputs = [("the program being trained", args.model),
              ("the dataset", dataset_file(args.dataset, args.data_dir))]
    # written when the job runs: their folders may not exist yet (nor exist here, on the login node)
    check_output_file("--json", args.json_out, is_report, "report", inputs + [("the checkpoint resumed from", args.resume)],
                      writable_now=False)
    check_output_file("--checkpoint", args.checkpoint, is_checkpoint, "checkpoint", inputs,
                      reusable_inputs=[args.resume], writable_now=False)
    check_output_file("--predictions", args.predictions, is_predictions, "predictions file",
                      inputs + [("the checkpoint resumed from", args.resume)], writable_now=False)
    script = args.output or f"{Path(args.model).stem}.sbatch"
    for what, path in inputs + [("the checkpoint resumed from", args.resume)]:
        if path and Path(script).exists() and os.path.samefile(script, path):
            raise UserError(f"morphgen: error: -o {script} is {what}; writing the script there would destroy it")
    check_distinct([("-o", script), ("--json", args.json_out), ("--checkpoint", args.checkpoint),
                    ("--predictions", args.predictions)])


def _train_command(args, bin_dir: Path) -> str:
    """`morphgen train ...` as shell text: every value quoted; only $SLURM_NTASKS is expanded."""
    exe = bin_dir / "morphgen"
    # A morphgen run as `python -m morphgen` may have no console script beside its python.
    words = [shlex.quote(str(exe))] if exe.is_file() else [shlex.quote(str(bin_dir / Path(sys.executable).name)),
                                                             "-m", "morphgen"]
    words += ["train", shlex.quote(_absolute(args.model)), "--backend", args.backend]
    if args.backend == "mpi":
        # fails with a clear message when the script is run by hand instead of through sbatch
        words += ["--ranks", '"${SLURM_NTASKS:?submit this script with sbatch}"']
    words += ["--threads", str(args.threads), "--dataset", shlex.quote(_dataset(args.dataset))]
    if args.data_dir is not None:
        words += ["--data-dir", shlex.quote(_absolute(args.data_dir))]
    if args.requeue and args.epochs is not None:
        # every run of a requeued job trains to the same end (--resume is only added on requeue)
        words += ["--until-epoch", str(args.epochs)]
    elif args.epochs is not None:
        words += ["--epochs", str(args.epochs)]
    if args.until_epoch is not None:
        words += ["--until-epoch", str(args.until_epoch)]
    if args.seed is not None:        # else train's default: 0, or the checkpoint's when it resumes
        words += ["--seed", str(args.seed)]
    for flag, value in (("--json", args.json_out), ("--checkpoint", args.checkpoint),
                        ("--predictions", args.predictions), ("--resume", None if args.requeue else args.resume),
                        ("--parts-dir", args.parts_dir)):
        if value is not None:
            words += [flag, shlex.quote(_absolute(value))]
    if args.checkpoint_every is not None:
        words += ["--checkpoint-every", str(args.checkpoint_every)]
    words.append("--quiet")   # a progress bar is noise in a log file
    if args.requeue:   # the script's choice (an empty array under `set -u` needs the + form)
        words.append('${resume[@]+"${resume[@]}"}')
    # one option per line, so the log's reader sees the run at a glance
    lines, line = [], [words[0]]
    for w in words[1:]:
        if w.startswith("--"):
            lines.append(" ".join(line))
            line = []
        line.append(w)
    lines.append(" ".join(line))
    return " \\\n    ".join(lines)


def _absolute(path: str) -> str:
    # The job may start in another directory than this command: fix relative paths to this one.
    return os.path.abspath(os.path.expanduser(path))


def _dataset(spec: str) -> str:
    """A dataset path made absolute; a name (looked up in --data-dir or $MORPHGEN_DATA) or a
    synthetic spec stays as written, as morphgen.data.resolve tells the two apart."""
    if spec == "synthetic" or spec.startswith("synthetic:"):
        return spec
    if "/" in spec or os.sep in spec or spec.startswith(".") or spec.endswith(_DATA_SUFFIXES):
        return _absolute(spec)
    return spec
