"""``grpolab study``'s choices about how rows run, checked before the study file's rows are
touched: where the workers run (this machine with devices per row, or Slurm jobs) and how many
seeds run (the file's seeds, or seeds on demand)."""

from __future__ import annotations

from grpolab.errors import ConfigError

# SlurmLauncher's field -> the flag that sets it, in the order refusals name them
SLURM_FLAGS = {"jobs": "--jobs", "partition": "--partition", "time": "--time", "folder": "--slurm-folder",
               "cpus_per_job": "--cpus-per-job", "account": "--account", "qos": "--qos", "mem": "--mem",
               "constraint": "--constraint", "exclude": "--exclude", "setup": "--setup", "params": "--slurm-param"}


def add_launch_flags(study) -> None:
    """Where a study's workers run: on this machine with devices per row, or as Slurm jobs."""
    study.add_argument("--gpus-per-row", type=int, default=None, metavar="K",
                       help="each worker owns K devices (its CUDA_VISIBLE_DEVICES); K > 1 runs each row as K "
                            "processes (torch.distributed) logging one MLflow run")
    study.add_argument("--devices", default=None, metavar="0,1,...", help="with --gpus-per-row: the device pool "
                       "(default: the study file's devices:, else CUDA_VISIBLE_DEVICES, else every CUDA device)")
    study.add_argument("--launcher", choices=["local", "slurm"], default="local",
                       help="slurm: run the workers as Slurm jobs through submitit (needs a PostgreSQL --storage)")
    slurm = study.add_argument_group("with --launcher slurm")
    slurm.add_argument("--jobs", type=int, default=None, metavar="N", help="worker jobs to submit (default 1)")
    slurm.add_argument("--partition", default=None, help="Slurm partition (default: the cluster's default)")
    slurm.add_argument("--time", default=None, metavar="T", help="time limit per job, e.g. 4:00:00 (default 24:00:00)")
    slurm.add_argument("--slurm-folder", default=None, metavar="DIR",
                       help="submitit's folder for job scripts and logs (default: <state>/slurm/<job id>)")
    slurm.add_argument("--cpus-per-job", type=int, default=None, metavar="C", help="CPUs per job (default: Slurm's)")
    for flag, what in (("--account", "account to charge"), ("--qos", "quality of service"),
                       ("--mem", "memory per job, e.g. 64G"), ("--constraint", "node features, e.g. a100"),
                       ("--exclude", "nodes not to use, e.g. node[01-02]")):
        slurm.add_argument(flag, default=None, help=f"Slurm {what} (default: launcher.slurm in the study file)")
    slurm.add_argument("--setup", action="append", default=None, metavar="LINE",
                       help="a shell line the job runs before the worker (module load, conda activate); repeatable")
    slurm.add_argument("--slurm-param", action="append", default=None, metavar="KEY=VALUE",
                       help="any other submitit Slurm parameter, e.g. gres=gpu:a100:2; repeatable")
    study.add_argument("--accelerate-config", default=None, metavar="FILE",
                       help="with --gpus-per-row K >= 2: launch each row's K processes with accelerate and this "
                            "config (e.g. studies/accelerate/zero3.yaml; default: launcher.accelerate_config)")


def slurm_values(args) -> dict:
    """The Slurm flags of a parsed command line, by SlurmLauncher field (None: not given)."""
    dest = {"folder": "slurm_folder", "params": "slurm_param"}
    return {field: getattr(args, dest.get(field, field)) for field in SLURM_FLAGS}


def launcher_options(launcher: str, slurm: dict, until_decided: bool, gpus_per_row, accelerate_config) -> dict | None:
    """The SlurmLauncher's keyword arguments for ``launcher: slurm``, else None (workers on this
    machine); Slurm's options without it are refused. ``slurm``: values by field (``params``: a
    mapping, or the command line's KEY=VALUE strings)."""
    if launcher not in ("local", "slurm"):
        raise ConfigError(f"launcher: unknown launcher {launcher!r}; valid: local, slurm")
    unknown = sorted(set(slurm) - set(SLURM_FLAGS))
    if unknown:
        raise ConfigError(f"slurm: unknown option {unknown[0]!r}; valid: {', '.join(SLURM_FLAGS)}")
    if launcher != "slurm":
        given = [flag for field, flag in SLURM_FLAGS.items() if slurm.get(field) is not None]
        if given:
            raise ConfigError(f"{given[0]}: only with --launcher slurm")
        if until_decided and gpus_per_row is not None:
            raise ConfigError("--gpus-per-row: not with --until-decided yet")
        if until_decided and accelerate_config is not None:
            raise ConfigError("--accelerate-config: not with --until-decided yet")
        return None
    if until_decided:
        raise ConfigError("--launcher slurm: not with --until-decided yet")
    from grpolab.studies.launch_options import parse_slurm_params
    params = slurm.get("params")
    if params is None or isinstance(params, (list, tuple)):
        params = parse_slurm_params(params or ())
    return {**{k: v for k, v in slurm.items() if k not in ("setup", "params")}, "gpus_per_row": gpus_per_row,
            "setup": tuple(slurm.get("setup") or ()), "params": dict(params)}


def seeds_on_demand(design, fixed_seeds: bool, until_decided: bool, max_seeds, batch):
    """The seeds-on-demand plan of ``grpolab study``: the study file's ``seeds: {first, batch, cap}``
    design by default (``--fixed-seeds`` runs its first seeds only), or ``--until-decided --max-seeds N
    [--batch B]``, whose flags override the file's cap and batch. ``design``: the file's
    ``SeedsOnDemand`` or None."""
    from grpolab.studies.definition import SeedsOnDemand
    if fixed_seeds:
        if until_decided or max_seeds is not None or batch is not None:
            raise ConfigError("--fixed-seeds: not with --until-decided, --max-seeds or --batch")
        return None
    if not until_decided:
        if max_seeds is not None or batch is not None:
            raise ConfigError("--max-seeds and --batch: only with --until-decided (or a seeds: {first, batch, cap} design)")
        return design
    cap = max_seeds if max_seeds is not None else (design.cap if design else None)
    if cap is None:
        raise ConfigError("--until-decided needs --max-seeds N (or a study file with seeds: {first, batch, cap})")
    return SeedsOnDemand(batch if batch is not None else (design.batch if design else 2), cap,
                         design.max_rows if design else None)
