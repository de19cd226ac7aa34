"""Stand-in for ansible-test's pip bootstrap script (get-pip), which this network cannot download.

ansible-test runs `python get_pip_<version>.py --disable-pip-version-check --quiet pip==<version>` in each new
sanity virtualenv; this does the same with the standard library's ensurepip, then pip itself from PyPI.
"""

import subprocess
import sys

subprocess.run([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"], check=True)
args = [a for a in sys.argv[1:] if not a.startswith("--")]
pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
subprocess.run([*pip, *args], check=True)
