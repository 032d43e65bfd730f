"""A process the command line owns answers importlib.metadata.packages_distributions() from one
scan of the installed distributions (grpolab.startup): the standard library's mapping, computed
once however often the stack asks, in fresh lists for every caller."""

import importlib.metadata
import subprocess
import sys

import pytest

from grpolab.startup import scan_packages_distributions

py311 = pytest.mark.skipif(sys.version_info[:2] != (3, 11), reason="the text scan follows Python 3.11's rule")


def _library_rule(dists) -> dict:
    """CPython 3.11's packages_distributions() over ``dists``."""
    found = {}
    for dist in dists:
        for name in importlib.metadata._top_level_declared(dist) or importlib.metadata._top_level_inferred(dist):
            found.setdefault(name, []).append(dist.metadata["Name"])
    return found


@py311
def test_the_scan_gives_the_standard_librarys_mapping_for_every_installed_distribution():
    ours, theirs = scan_packages_distributions(), importlib.metadata.packages_distributions()
    assert ours == theirs, {k: (ours.get(k), theirs.get(k)) for k in set(ours) | set(theirs)
                            if ours.get(k) != theirs.get(k)}
    assert len(ours) > 100 and "torch" in ours and ours["yaml"] == ["PyYAML"]   # declared and inferred names


# (folder, files): distributions whose RECORD or METADATA take the unusual branches
ODD = {
    "plain-1.0.dist-info": {"METADATA": "Metadata-Version: 2.1\nName: plain\n\nbody",
                            "RECORD": "plain/__init__.py,,\nplain/x.so,,\ntop_mod.py,,\n\"we,ird/a.py\",,\n"},
    "paths-1.0.dist-info": {"METADATA": "Metadata-Version: 2.1\nName: paths  \n",
                            "RECORD": "./dot.py,,\n/abs/y.py,,\npkg/.py,,\n.py,,\n../../bin/tool.py,,\n"},
    "empty-1.0.dist-info": {"METADATA": "Metadata-Version: 2.1\nname: lowercase-header\n", "RECORD": ""},
    "folded-1.0.dist-info": {"METADATA": "Metadata-Version: 2.1\nName:\n folded\n", "RECORD": "f/__init__.py,,\n"},
    "declared-1.0.dist-info": {"METADATA": "Metadata-Version: 2.1\nName: declared\n", "top_level.txt": "a\nb\n",
                               "RECORD": "c/__init__.py,,\n"},
    "legacy.egg-info": {"PKG-INFO": "Metadata-Version: 1.0\nName: legacy\n", "SOURCES.txt": "legacy/__init__.py\n"},
}


@py311
def test_the_scan_follows_the_library_on_unusual_records_and_headers(tmp_path):
    dists = []
    for folder, files in ODD.items():
        (tmp_path / folder).mkdir()
        for name, text in files.items():
            (tmp_path / folder / name).write_text(text)
        dists.append(importlib.metadata.PathDistribution(tmp_path / folder))
    ours = scan_packages_distributions(dists)
    assert ours == _library_rule(dists)
    assert ours["plain"] == ours["top_mod"] == ours["we,ird"] == ["plain"] and ours["dot"] == ["paths  "]
    assert ours["a"] == ours["b"] == ["declared"] and "c" not in ours and ours["f"] == ["\nfolded"]   # the parser's value


PROBE = """
import importlib.metadata, sys
from grpolab import startup
calls = []
scan = startup.scan_packages_distributions
startup.scan_packages_distributions = lambda: calls.append(1) or scan()
library = importlib.metadata.packages_distributions()
startup.own_process()
import trl.import_utils, transformers.utils.import_utils as iu
trl_utils = sys.modules['trl.import_utils']
first, second = importlib.metadata.packages_distributions(), importlib.metadata.packages_distributions()
assert iu._package_distribution_mapping() == trl_utils.PACKAGE_DISTRIBUTION_MAPPING == first == library
first["torch"].append("changed by a caller")
assert second["torch"] == library["torch"] and importlib.metadata.packages_distributions() == library
print(len(calls))
"""


@py311
def test_an_owned_process_scans_once_for_transformers_and_trl_and_each_caller_gets_its_own_lists():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"]
