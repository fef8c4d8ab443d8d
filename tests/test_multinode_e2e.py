"""Benchmarks under torchrun on several nodes (issue 35): two "nodes" on one machine.

Each "node" is its own torchrun launch, ``--nnodes 2 --nproc-per-node 1`` with a c10d rendezvous on
loopback, both started at once in the ``pytester`` folder (``subprocess.Popen``: one launch waits
for the other in the rendezvous). With the c10d backend the rendezvous numbers the nodes
(``--node-rank`` is ignored, with a warning): torch 2.13 sorts the nodes by address (the host
name, or ``--local-addr``), then the launcher's process id, so on one machine node 0 is usually the
launch started first; the test pins it with ``--local-addr``.
Each rank sees ``LOCAL_RANK=0``, ``LOCAL_WORLD_SIZE=1``, ``WORLD_SIZE=2``. Scripted timings, so
every verdict is the same on any machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from scripted import script_timings

dist = pytest.importorskip("torch.distributed")
pytestmark = pytest.mark.skipif(not dist.is_available(), reason="torch.distributed is not available in this torch build")

BENCHES = """
import os
import pytest

@pytest.mark.gpu_bench(max_time=0.05, min_rounds=10)
def test_local(gpu_bench):
    gpu_bench(lambda: None)

@pytest.mark.gpu_bench(max_time=0.05, min_rounds=10)
def test_step(gpu_bench):
    gpu_bench(lambda: None)

def test_environment():
    print("ENV", {k: os.environ[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE")})
"""

#: A launch (both "nodes") that has not finished after this many seconds is killed, and the test fails.
TIMEOUT_S = 180


def free_port() -> int:
    """A TCP port on loopback that nothing listens on now (the rendezvous endpoint's)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def two_nodes(pytester: pytest.Pytester, *args: str, folders: tuple[Path, Path] | None = None,
              local_addrs: tuple[str, str] | None = None) -> list[tuple[int, str]]:
    """``pytest ARGS`` on two "nodes" of one process each: two torchrun launches at once, rendezvous
    c10d on loopback; each launch's (exit code, output), in the order they were started. ``folders``:
    each launch's working folder (default: both in the ``pytester`` folder); ``local_addrs``: each
    launch's ``--local-addr`` (the c10d rendezvous numbers the nodes in the order of their address,
    then process id). A launch still running after :data:`TIMEOUT_S` s: both process groups are
    killed and the test fails."""
    endpoint, run_id = f"127.0.0.1:{free_port()}", uuid.uuid4().hex[:8]
    procs, logs = [], []
    for node in range(2):
        cwd = folders[node] if folders else pytester.path
        addr = ["--local-addr", local_addrs[node]] if local_addrs else []
        log = pytester.path / f"node{node}-{run_id}.log"
        logs.append(log)
        with log.open("wb") as out:  # a file, not a pipe: a launch never blocks on output nobody reads
            procs.append(pytester.popen(
                [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
                 "--node-rank", str(node), "--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint,
                 "--rdzv-id", run_id, "--rdzv-conf", "join_timeout=60", *addr,
                 "-m", "pytest", "-p", "no:cacheprovider", "-s", *args],
                stdout=out, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd))
    try:
        codes = [p.wait(timeout=TIMEOUT_S) for p in procs]
    except subprocess.TimeoutExpired:
        codes = None
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
    texts = [log.read_text(errors="replace") for log in logs]
    for log in logs:
        log.unlink()
    if codes is None:
        pytest.fail(f"two torchrun launches still running after {TIMEOUT_S} s: killed\n" + "\n----\n".join(texts))
    return list(zip(codes, texts))


def test_two_nodes_with_their_own_folders_update_then_rerun(pytester: pytest.Pytester) -> None:
    """Two "nodes" of one rank each, each in its own copy of the suite (as on two machines), the
    node of global rank 0 pinned by its ``--local-addr`` (``127.0.0.1`` sorts before ``localhost``):
    both launches exit 0; each rank sees LOCAL_RANK 0 and LOCAL_WORLD_SIZE 1 of WORLD_SIZE 2; the
    update writes exactly one baseline file, once (global rank 0 alone), in rank 0's folder, keyed
    ``-ws2`` (the world size, not the node's 1 process), and only rank 0's launch prints the
    summary; a ``--gpuperf`` rerun passes the same tests on both nodes although the other node has
    no baseline (rank 0 judges), and writes nothing there. (One launch pair costs about 25 s.)"""
    folders = (pytester.mkdir("node_a"), pytester.mkdir("node_b"))
    for folder in folders:
        (folder / "test_d.py").write_text(BENCHES)
    script_timings(pytester, {"ms": 2.0})
    for folder in folders:
        for name in ("conftest.py", "timings.json"):
            (folder / name).write_text((pytester.path / name).read_text())
    (pytester.path / "conftest.py").unlink()
    addrs = ("localhost", "127.0.0.1")  # node_b's launch is global rank 0
    update = two_nodes(pytester, "--gpuperf-update-baselines", folders=folders, local_addrs=addrs)
    assert [code for code, _ in update] == [0, 0], "\n----\n".join(out for _, out in update)
    seen = sorted(line.split("ENV ", 1)[1] for _, out in update for line in out.splitlines() if "ENV {" in line)
    assert seen == [f"{{'RANK': '{r}', 'WORLD_SIZE': '2', 'LOCAL_RANK': '0', 'LOCAL_WORLD_SIZE': '1'}}"
                    for r in (0, 1)], seen
    assert "'RANK': '0'" in update[1][1] and "gpuperf: 2 benchmark(s)" in update[1][1], update[1][1]
    assert "gpuperf: 2 benchmark(s)" not in update[0][1]  # the summary: rank 0's launch only
    files = sorted(p.relative_to(pytester.path).as_posix() for p in pytester.path.rglob("baselines/**/*.json"))
    assert len(files) == 1 and files[0].startswith("node_b/baselines/") and files[0].endswith("-ws2/test_d.json"), files
    entry = json.loads((pytester.path / files[0]).read_text())["benchmarks"]["test_local"]
    assert len(entry["history"]) == 1 and entry["ranks"]["world_size"] == 2  # one writer

    rerun = two_nodes(pytester, "--gpuperf", folders=folders, local_addrs=addrs)
    assert [code for code, _ in rerun] == [0, 0], "\n----\n".join(out for _, out in rerun)
    assert all("3 passed" in out for _, out in rerun), rerun
    assert not (folders[0] / "baselines").exists()
