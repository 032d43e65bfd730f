"""A process the command line owns answers importlib.metadata.packages_distributions() from one
text scan of the installed distributions (grpolab.startup): the same mapping as the standard
library's, computed once however often the stack asks."""

import importlib.metadata
import subprocess
import sys

from grpolab.startup import scan_packages_distributions


def test_the_scan_gives_the_standard_librarys_mapping_for_every_installed_distribution():
    ours, theirs = scan_packages_distributions(), importlib.metadata.packages_distributions()
    assert ours == theirs, {k: (ours.get(k), theirs.get(k)) for k in set(ours) | set(theirs)
                            if ours.get(k) != theirs.get(k)}
    assert len(ours) > 100 and "torch" in ours and ours["yaml"] == ["PyYAML"]   # declared and inferred names


PROBE = """
import importlib.metadata, sys
from grpolab import startup
calls = []
scan = startup.scan_packages_distributions
startup.scan_packages_distributions = lambda: calls.append(1) or scan()
startup.own_process()
import trl.import_utils, transformers.utils.import_utils as iu
trl_utils = sys.modules['trl.import_utils']
first = importlib.metadata.packages_distributions()
assert iu._package_distribution_mapping() is first and trl_utils.PACKAGE_DISTRIBUTION_MAPPING is first
print(len(calls))
"""


def test_an_owned_process_scans_once_for_transformers_and_trl():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["1"]
