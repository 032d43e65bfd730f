#!/usr/bin/env python3
"""A wheelhouse for a GPU machine without internet: grpolab and every package it needs, as wheels,
for a named Python version and platform, except torch and the CUDA libraries (nvidia-*, triton,
cuda-*). Those stay the machine's own: its torch was built for its driver and CUDA, and a
wheelhouse that carried them would replace it (they are also most of the size: torch and its
nvidia-* wheels weigh several GB).

torch's own pure-Python requirements (filelock, sympy, networkx, jinja2, fsspec, typing_extensions,
mpmath, markupsafe, ...) are carried like any other package: transformers and datasets need
several of them too, and the pins must agree with the rest of the set.

Build it where pip reaches an index, install it where it does not:

    python3 scripts/wheelhouse.py -o wheels --python-version 3.12 --platform manylinux_2_28_x86_64
    python3 -m pip install --no-index --find-links wheels --no-deps -r wheels/requirements.txt

How the set is chosen: grpolab's wheel is built from this checkout (``pip wheel --no-deps``); pip
resolves it for the target (``pip install --dry-run --report`` with ``--only-binary=:all:`` and
the target's tags), constrained to the versions installed here for every package of grpolab's
dependency closure (what the test suite ran with; ``--fresh`` resolves the newest versions
instead); then every resolved package except the excluded ones is fetched with ``pip download
--no-deps --only-binary=:all:``. ``requirements.txt`` in the output lists the exact pins.
Installing with ``--no-deps`` keeps pip from asking for torch==2.13.0 (grpolab's pin) on a machine
whose torch is another version; ``python3 -m pip check`` then names that difference.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from importlib import metadata
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
EXCLUDED = re.compile(r"^(torch|triton|nvidia-.*|cuda-.*)$")
MANIFEST = "requirements.txt"
TARGET = "target.json"   # the pip flags the wheels were fetched for: a rebuild for another target starts over


def target_flags(python_version: str | None, platforms: list[str]) -> list[str]:
    """pip's flags for another interpreter: its version, CPython, its ABI, and each platform with
    the older manylinux tags it also accepts (a manylinux_2_28 machine runs manylinux_2_17 wheels;
    pip does not add them itself)."""
    if not python_version and not platforms:
        return []
    if not python_version or not platforms:
        raise SystemExit("wheelhouse: --python-version and --platform go together (or give neither: this machine)")
    if not re.fullmatch(r"3\.\d+", python_version):
        raise SystemExit(f"wheelhouse: --python-version {python_version!r}: want MAJOR.MINOR, e.g. 3.12")
    abi = "cp" + python_version.replace(".", "")
    flags = ["--python-version", python_version, "--implementation", "cp", "--abi", abi, "--abi", "abi3",
             "--abi", "none"]
    for platform in platforms:
        for tag in accepted_platforms(platform):
            flags += ["--platform", tag]
    return flags


def accepted_platforms(platform: str) -> list[str]:
    """``manylinux_2_28_x86_64`` -> itself, manylinux_2_27 ... manylinux_2_17 and their legacy
    aliases (manylinux2014 = 2_17, manylinux2010 = 2_12, manylinux1 = 2_5); other tags as given."""
    found = re.fullmatch(r"manylinux_2_(\d+)_(\w+)", platform)
    if not found:
        return [platform]
    glibc, arch = int(found.group(1)), found.group(2)
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(glibc, 4, -1)]
    legacy = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return tags + [f"{name}_{arch}" for minor, name in legacy.items() if minor <= glibc]


def installed_closure(extras: list[str]) -> dict[str, str]:
    """name -> version installed here, for every package grpolab (with ``extras``) needs, transitively."""
    try:
        metadata.distribution("grpolab")
    except metadata.PackageNotFoundError:
        raise SystemExit("wheelhouse: grpolab is not installed in this Python, so there are no installed versions "
                         "to pin: run `make install` first, or give --fresh to resolve the newest ones") from None
    pins, todo, seen, env = {}, [("grpolab", tuple(extras))], set(), default_environment()
    while todo:
        name, wanted = todo.pop()
        if (canonicalize_name(name), wanted) in seen:
            continue
        seen.add((canonicalize_name(name), wanted))
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue   # a requirement of another platform or Python, absent here: the resolver decides it
        pins[canonicalize_name(dist.metadata["Name"])] = dist.version
        for line in dist.requires or []:
            req = Requirement(line)
            if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in (*wanted, "")):
                todo.append((req.name, tuple(req.extras)))
    return pins


def _pip(*args: str) -> None:
    done = subprocess.run([sys.executable, "-m", "pip", *args], capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"wheelhouse: pip {' '.join(args[:1])} failed ({done.returncode}):\n{done.stderr[-3000:]}")


def resolve(wheel: Path, extras: list[str], flags: list[str], constraints: dict[str, str]) -> dict[str, str]:
    """name -> version pip resolves for the target, grpolab itself included."""
    with tempfile.TemporaryDirectory() as tmp:
        report, pinned = Path(tmp) / "report.json", Path(tmp) / "constraints.txt"
        pinned.write_text("".join(f"{n}=={v}\n" for n, v in constraints.items()))
        requirement = f"grpolab[{','.join(extras)}] @ {wheel.as_uri()}" if extras else str(wheel)
        _pip("install", "--dry-run", "--ignore-installed", "--quiet", "--only-binary=:all:", "--report", str(report),
             "--target", str(Path(tmp) / "target"), "-c", str(pinned), *flags, requirement)
        items = json.loads(report.read_text())["install"]
    return {canonicalize_name(i["metadata"]["name"]): i["metadata"]["version"] for i in items}


def pins_for(wheel: Path, flags: list[str], extras: list[str], fresh: bool) -> dict[str, str]:
    """name -> version of the whole set, grpolab and the excluded packages included. This machine
    (no flags): the versions installed here, read from their metadata, no resolution needed;
    another target, or ``fresh``: pip's resolution for it."""
    if fresh:
        return resolve(wheel, extras, flags, {})
    installed = installed_closure(extras)
    if not flags:
        return {**installed, "grpolab": wheel.name.split("-")[1]}
    return resolve(wheel, extras, flags, {n: v for n, v in installed.items() if n != "grpolab" and not EXCLUDED.match(n)})


def _download(pins: list[str], out: Path, flags: list[str], jobs: int) -> None:
    """``pip download --no-deps`` of ``pins`` in ``jobs`` processes at once: each pin costs an index
    page round trip, which the processes overlap."""
    chunks = [pins[i::jobs] for i in range(jobs) if pins[i::jobs]]
    procs = [subprocess.Popen([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                               "-d", str(out), *flags, *chunk], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True) for chunk in chunks]
    failed = [(p.wait(), p.stderr.read()) for p in procs]
    errors = [err[-2000:] for code, err in failed if code]
    if errors:
        raise SystemExit("wheelhouse: pip download failed:\n" + "\n".join(errors))


def _present(out: Path) -> dict[tuple[str, str], Path]:
    found = {}
    for path in out.glob("*.whl"):
        name, version, _, _ = parse_wheel_filename(path.name)
        found[(name, str(version))] = path
    return found


def build(out: Path, python_version: str | None, platforms: list[str], extras: list[str], fresh: bool,
          jobs: int = 4) -> dict:
    """Build (or bring up to date) the wheelhouse in ``out``: a rebuild fetches only the wheels
    whose pins changed, for the same target, and removes the ones no longer in the set."""
    flags = target_flags(python_version, platforms)
    if out.exists() and any(out.iterdir()) and not (out / TARGET).exists():
        raise SystemExit(f"wheelhouse: {out} is neither empty nor a wheelhouse (no {TARGET}): give a new folder")
    out.mkdir(parents=True, exist_ok=True)
    if (out / TARGET).exists() and json.loads((out / TARGET).read_text()) != flags:
        for old in out.glob("*.whl"):   # another target's wheels
            old.unlink()
    for old in out.glob("grpolab-*.whl"):
        old.unlink()
    _pip("wheel", "--no-deps", "--no-build-isolation", "--quiet", "-w", str(out), str(ROOT))
    wheel = next(out.glob("grpolab-*.whl"))
    pins = pins_for(wheel, flags, extras, fresh)
    kept = {n: v for n, v in sorted(pins.items()) if not EXCLUDED.match(n)}
    present = _present(out)
    for key, path in present.items():
        if key[0] not in kept or str(Version(kept[key[0]])) != key[1]:
            path.unlink()
    missing = [f"{n}=={v}" for n, v in kept.items() if (n, str(Version(v))) not in present and n != "grpolab"]
    _download(missing, out, flags, jobs)
    (out / MANIFEST).write_text("".join(f"{n}=={v}\n" for n, v in kept.items()))
    (out / TARGET).write_text(json.dumps(flags))
    wheels = sorted(out.glob("*.whl"))
    return {"folder": str(out), "python": python_version or "%d.%d" % sys.version_info[:2],
            "platforms": platforms or ["this machine"], "wheels": len(wheels), "fetched": len(missing),
            "mib": round(sum(w.stat().st_size for w in wheels) / 2**20, 1),
            "left_out": sorted(n for n in pins if EXCLUDED.match(n))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("-o", "--out", required=True, type=Path, help="the wheelhouse folder (new, or an earlier one)")
    parser.add_argument("--python-version", default=None, help="the target's Python, e.g. 3.12 (default: this one)")
    parser.add_argument("--platform", action="append", default=[], dest="platforms",
                        help="the target's platform tag, e.g. manylinux_2_28_x86_64 (repeatable; default: this one)")
    parser.add_argument("--extras", default="", help="grpolab extras to carry too, comma-separated, e.g. figures")
    parser.add_argument("--fresh", action="store_true",
                        help="resolve the newest allowed versions, not the ones installed here")
    parser.add_argument("--jobs", type=int, default=4, help="pip download processes at once (default 4)")
    args = parser.parse_args(argv)
    if args.jobs < 1:
        parser.error(f"--jobs: must be >= 1, got {args.jobs}")
    extras = [e for e in args.extras.split(",") if e]
    summary = build(args.out.resolve(), args.python_version, args.platforms, extras, args.fresh, args.jobs)
    print(json.dumps(summary, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
