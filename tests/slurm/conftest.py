"""A real SLURM for the tests: ``tools/dev/slurm_cluster.sh`` on this machine.

The session's cluster (munge, slurmctld, two slurmd of 2 CPUs each) lives in
its own folder and ports, so that a cluster a developer started by hand is
left alone; it is stopped at the end of the session. Where it cannot run (not
root, no apt-get to install SLURM) the SLURM tests skip with that reason.
"""

import os
import subprocess

import pytest

from tests.conftest import REPO_ROOT

SCRIPT = os.path.join(REPO_ROOT, "tools", "dev", "slurm_cluster.sh")
CANNOT_RUN = 3  # the script's status when this machine cannot run the cluster
PORT = "16917"


@pytest.fixture(scope="session")
def slurm_env(tmp_path_factory):
    """The environment in which SLURM's commands reach the test cluster."""
    folder = tmp_path_factory.mktemp("slurm")
    env = dict(os.environ, SLOWFAST_SLURM_DIR=str(folder), SLOWFAST_SLURM_PORT=PORT)
    out = subprocess.run(
        ["bash", SCRIPT, "start"], env=env, capture_output=True, text=True, timeout=600
    )
    if out.returncode == CANNOT_RUN:
        pytest.skip(f"no SLURM test cluster: {out.stderr.strip()}")
    if out.returncode != 0:  # stop what did start, then fail
        subprocess.run(["bash", SCRIPT, "stop"], env=env, capture_output=True)
        pytest.fail(f"the SLURM test cluster did not start: {out.stdout}{out.stderr}")
    env["SLURM_CONF"] = str(folder / "slurm.conf")
    yield env
    subprocess.run(["bash", SCRIPT, "stop"], env=env, capture_output=True, timeout=60)
