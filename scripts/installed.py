"""Exit 0 when this checkout is already installed as `make install` (or `make install-test`) would
install it, so the Makefile can skip pip; exit 3 when only grpolab itself needs installing (every
requirement is met), so `pip install --no-deps -e .` is enough; exit 1, naming the first thing
missing, otherwise.

pip spends ~20 s re-resolving and re-building the editable wheel even when nothing changes, on every
`make test`; re-pointing the editable install at a new clone (CI's case) without resolving takes ~4 s. "Installed" means all of:
- grpolab is an editable install of this very checkout (pip's direct_url.json points here), whose
  installed metadata (version, console scripts, Requires-Dist) is what pyproject.toml declares now;
- every requirement of pyproject.toml's [project.dependencies], and of each `--extra` named, is
  satisfied by an installed distribution (versions checked with pip's own specifier rules);
- every extra `name==version` pin given on the command line is installed at that version.
Dependencies of dependencies are not re-checked: pip resolved them when it installed these, and a
broken one fails the first import loudly. A requirement with extras always sends it to pip. Needs only the standard library and `packaging`; without
`packaging` it answers "not installed", so pip runs.
"""
from __future__ import annotations

import argparse
import importlib.metadata as metadata
import json
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def editable_mismatch(repo: Path = REPO) -> str | None:
    """Why grpolab is not an editable install of ``repo``, or None when it is."""
    try:
        url = json.loads(metadata.distribution("grpolab").read_text("direct_url.json") or "{}")
    except metadata.PackageNotFoundError:
        return "grpolab"
    if not url.get("dir_info", {}).get("editable") or url.get("url") != repo.as_uri():
        return f"grpolab as an editable install of {repo} (it points to {url.get('url')})"
    return None


def _declared(line: str, extra: str | None = None) -> tuple:
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name
    req = Requirement(line)
    marker = str(req.marker) if req.marker else ""
    if extra is not None and marker:
        return ("unsupported", line)   # a marker inside an extra: compared by pip only
    return (canonicalize_name(req.name), str(req.specifier), tuple(sorted(req.extras)),
            f'extra == "{extra}"' if extra is not None else marker)


def metadata_mismatch(project: dict) -> str | None:
    """Why the installed grpolab metadata (version, console scripts, Requires-Dist) is not what
    pyproject.toml declares now, or None: pip writes them at install time, so an entry point or a
    requirement changed since then needs pip again even when every requirement happens to be met."""
    dist = metadata.distribution("grpolab")
    if dist.version != project["version"]:
        return f"grpolab {project['version']} (installed metadata: {dist.version})"
    scripts = {ep.name: ep.value for ep in dist.entry_points if ep.group == "console_scripts"}
    if scripts != project.get("scripts", {}):
        return f"grpolab's console scripts {project.get('scripts', {})} (installed: {scripts})"
    declared = {_declared(line) for line in project["dependencies"]}
    for extra, lines in project.get("optional-dependencies", {}).items():
        declared |= {_declared(line, extra) for line in lines}
    installed = {_declared(line) for line in dist.requires or []}
    if declared != installed:
        return f"grpolab's requirements as pyproject.toml declares them ({len(declared ^ installed)} differ from the installed metadata)"
    return None


def requirement_missing(wanted: list[str]) -> str | None:
    """The first requirement line no installed distribution satisfies, in words, or None."""
    from packaging.requirements import Requirement
    for line in wanted:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        if req.extras:   # the extras' own requirements are pip's to resolve
            return f"{line} (a requirement with extras)"
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return line
        if not req.specifier.contains(version, prereleases=True):
            return f"{line} (installed: {version})"
    return None


def first_missing(extras: list[str], pins: list[str]) -> tuple[str | None, bool]:
    """(what is not installed as asked, in words, or None when everything is; whether it is grpolab
    alone: every requirement met, only the editable install or its metadata out of date)."""
    try:
        import packaging.requirements  # noqa: F401
    except ImportError:
        return "the packaging module (needed to compare versions)", False
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + pins
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    requirement = requirement_missing(wanted)
    if requirement is not None:
        return requirement, False
    stale = editable_mismatch() or metadata_mismatch(project)
    return stale, stale is not None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependencies group to check too")
    parser.add_argument("pins", nargs="*", help="further name==version requirements (the --no-deps installs)")
    args = parser.parse_args(argv)
    missing, only_grpolab = first_missing(args.extra, args.pins)
    if missing is None:
        print(f"installed: this checkout and its requirements ({', '.join(['base', *args.extra])}); pip skipped")
        return 0
    if only_grpolab:
        print(f"not installed: {missing}; every requirement is met, so grpolab alone is installed (pip --no-deps)")
        return 3
    print(f"not installed: {missing}; installing")
    return 1


if __name__ == "__main__":
    sys.exit(main())
