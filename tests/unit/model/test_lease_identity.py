"""A lease holder is judged dead early only where its PID means a process: its boot and PID namespace.

Containers of one host may share its host name, each with its own PIDs: a holder's PID that does
not exist here may be a live process there, whose lease must then last until it expires.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys

import pytest

from memwal_core.model import lease
from memwal_core.model.lease import pid_namespace


@pytest.fixture(scope="module")
def dead_pid() -> int:
    """A PID no process of this namespace has any more."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_only_a_holder_of_this_boot_and_pid_namespace_is_judged_dead(dead_pid: int) -> None:
    here = pid_namespace()
    assert here is not None and "/" in here
    boot = here.split("/")[0]
    host = socket.gethostname()
    assert lease._dead_local_owner(f"{host}:{dead_pid}:cafe:{here}")
    assert not lease._dead_local_owner(f"{host}:{dead_pid}:cafe:{boot}/4026599999"), "another container"
    assert not lease._dead_local_owner(f"{host}:{dead_pid}:cafe:0-other-boot/{here.split('/')[1]}")
    assert not lease._dead_local_owner(f"{host}:{dead_pid}:cafe"), "an earlier memwal's: namespace unknown"
    assert not lease._dead_local_owner(f"other-host:{dead_pid}:cafe"), "an earlier memwal's, elsewhere"
    assert not lease._dead_local_owner(f"{host}:{os.getpid()}:cafe:{here}"), "this process"
    assert lease._owner_id().startswith(f"{host}:") and lease._owner_id().endswith(f":{here}")


@pytest.mark.skipif(shutil.which("unshare") is None, reason="util-linux's unshare is not installed")
def test_a_process_in_its_own_pid_namespace_names_another() -> None:
    """A container's processes (here: `unshare --pid`, as root) carry a namespace of their own."""
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", sys.executable, "-c", PRINT_OWNER],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if done.returncode != 0 and "Operation not permitted" in done.stderr:
        pytest.skip("no permission to make a PID namespace")
    assert done.returncode == 0, done.stderr
    owner = done.stdout.strip()
    _host, pid, _random, namespace = owner.split(":")
    assert pid == "1" and namespace != pid_namespace()
    assert not lease._dead_local_owner(owner)


PRINT_OWNER = "from memwal_core.model.lease import _owner_id; print(_owner_id())"
