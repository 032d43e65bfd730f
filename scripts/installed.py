"""Exit 0 when this checkout is already installed as `make install` (or `make install-test`) would
install it, so the Makefile can skip pip; exit 1, naming the first thing missing, otherwise.

pip spends ~20 s re-resolving and re-building the editable wheel even when nothing changes, on every
`make test`. "Installed" means all of:
- grpolab is an editable install of this very checkout (pip's direct_url.json points here);
- every requirement of pyproject.toml's [project.dependencies], and of each `--extra` named, is
  satisfied by an installed distribution (versions checked with pip's own specifier rules);
- every extra `name==version` pin given on the command line is installed at that version.
Dependencies of dependencies are not re-checked: pip resolved them when it installed these, and a
broken one fails the first import loudly. Needs only the standard library and `packaging`; without
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


def requirement_missing(wanted: list[str]) -> str | None:
    """The first requirement line no installed distribution satisfies, in words, or None."""
    from packaging.requirements import Requirement
    for line in wanted:
        req = Requirement(line)
        if req.marker is not None and not req.marker.evaluate():
            continue
        try:
            version = metadata.version(req.name)
        except metadata.PackageNotFoundError:
            return line
        if not req.specifier.contains(version, prereleases=True):
            return f"{line} (installed: {version})"
    return None


def first_missing(extras: list[str], pins: list[str]) -> str | None:
    """What is not installed as asked, in words, or None when everything is."""
    try:
        import packaging.requirements  # noqa: F401
    except ImportError:
        return "the packaging module (needed to compare versions)"
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    wanted = list(project["dependencies"]) + pins
    for extra in extras:
        wanted += project["optional-dependencies"][extra]
    return editable_mismatch() or requirement_missing(wanted)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra", action="append", default=[], help="an optional-dependencies group to check too")
    parser.add_argument("pins", nargs="*", help="further name==version requirements (the --no-deps installs)")
    args = parser.parse_args(argv)
    missing = first_missing(args.extra, args.pins)
    if missing is None:
        print(f"installed: this checkout and its requirements ({', '.join(['base', *args.extra])}); pip skipped")
        return 0
    print(f"not installed: {missing}; installing")
    return 1


if __name__ == "__main__":
    sys.exit(main())
