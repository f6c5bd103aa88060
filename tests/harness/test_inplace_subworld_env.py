"""A sub-world looks like a launch of its own (issue 72): under torchrun with 4 ranks on
one CPU host, a world(2) test on ranks 2, 3 sees each row of the table in
docs/running-in-place.md ("What a test sees of its launch"), and the two ways public
suites read their launch work there:

- OLMo-core lets the rank whose LOCAL_RANK is 0 create a folder the others wait for:
  with LOCAL_RANK left the launcher's (2, 3), nobody created it and both waited;
- DeepSpeed names shared memory after MASTER_PORT: with the launcher's port in every
  sub-world, two sub-worlds met in one name.
"""

from __future__ import annotations

import json
import os
import xml.etree.ElementTree as ET

import pytest
from jobs import run_torchrun_pytest

from tests.once import once_per_run

# slow: starts torchrun with 4 ranks, and pytest on every rank
pytestmark = [pytest.mark.dist, pytest.mark.torch_dist, pytest.mark.slow]

SUITE = """\
import json
import os
import time

import pytest
import torch
import torch.distributed as dist

LAUNCHED_AS = os.environ["LOCAL_RANK"]  # read at import: one host, so the global rank
LAUNCHED_LOCAL_WORLD = int(os.environ["LOCAL_WORLD_SIZE"])  # the launcher's, at import
NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
         "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
         "TORCHELASTIC_RUN_ID", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RESTART_COUNT",
         "TORCHELASTIC_MAX_RESTARTS", "ROLE_NAME")


def note(name):
    seen = {n: os.environ.get(n) for n in NAMES}
    seen["cuda"] = torch.cuda.current_device() if torch.cuda.is_available() else None
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if not gpus:
        seen["expected_cuda"] = None
    elif gpus >= LAUNCHED_LOCAL_WORLD:
        seen["expected_cuda"] = int(os.environ["LOCAL_RANK"])
    else:
        seen["expected_cuda"] = 0
    folder = os.environ["SUBWORLD_NOTES"]
    with open(os.path.join(folder, f"{name}.{LAUNCHED_AS}.json"), "w") as f:
        json.dump(seen, f)


@pytest.mark.world(4)
def test_w4():
    note("w4")


@pytest.mark.world(2)
@pytest.mark.parametrize("i", [0, 1])
def test_w2(i):
    note(f"w2_{i}")


@pytest.mark.world(2)
@pytest.mark.parametrize("i", [0, 1])
def test_local_rank_zero_makes_the_folder(dist_tmp_path, i):
    # once per host, by the rank with local rank 0; the others wait for it
    folder = dist_tmp_path / "unsharded"
    if os.environ["LOCAL_RANK"] == "0":
        folder.mkdir()
    deadline = time.monotonic() + 10
    while not folder.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting on {folder} to be created")
        time.sleep(0.05)
    device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))  # built, not used, on CPU
    assert device.index < int(os.environ["LOCAL_WORLD_SIZE"])


@pytest.mark.world(2)
@pytest.mark.parametrize("i", [0, 1])
def test_named_after_master_port(rank, i):
    # one name per launch, as DeepSpeed names its shared memory
    if rank == 0:
        os.mkdir(os.path.join(os.environ["SUBWORLD_NOTES"], "port-" + os.environ["MASTER_PORT"]))


@pytest.mark.world(2)
@pytest.mark.parametrize("i", [0, 1])
def test_own_env_rendezvous(rank, i):
    # a rendezvous of the test's own over env://, at the sub-world's MASTER_ADDR:PORT
    store = next(dist.rendezvous("env://"))[0]
    store.set(f"from{rank}", str(i))
    assert store.get(f"from{1 - rank}").decode() == str(i)
    dist.barrier()  # rank 0's store serves until rank 1 has read


def test_plain():
    note("plain")
"""


@pytest.fixture(scope="module")
def run(request, tmp_path_factory):
    """The suite under torchrun on 4 ranks, once per run (tests/once.py)."""

    def launch():
        folder = tmp_path_factory.mktemp("subworld_env")
        (folder / "test_suite.py").write_text(SUITE)
        (folder / "pytest.ini").write_text("[pytest]\n")
        notes = folder / "notes"
        notes.mkdir()
        proc = run_torchrun_pytest(
            folder, "-p", "no:randomly", "-q", "--rankgate-timeout=30",
            "--junitxml=out/junit.xml", "test_suite.py", ranks=4,
            env={**os.environ, "SUBWORLD_NOTES": str(notes)}, timeout=240,
        )  # fmt: skip
        seen = {
            p.name.removesuffix(".json"): json.loads(p.read_text()) for p in notes.glob("*.json")
        }
        return proc, folder, seen

    return once_per_run(request, launch)


def verdicts(folder) -> dict[str, dict[int, str]]:
    """test -> {global rank: its outcome} from every rank's JUnit file."""
    out: dict[str, dict[int, str]] = {}
    for path in sorted((folder / "out").glob("junit.rank*.xml")):
        rank = int(path.name.split(".")[1].removeprefix("rank"))
        for case in ET.parse(path).getroot().iter("testcase"):
            bad = [c.tag for c in case if c.tag in ("failure", "error", "skipped")]
            out.setdefault(case.get("name"), {})[rank] = bad[0] if bad else "passed"
    return out


def test_every_test_passes(run):
    proc, folder, _ = run
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-3000:]
    seen = verdicts(folder)
    assert len(seen) == 10, seen
    assert all(set(v.values()) == {"passed"} for v in seen.values()), seen


def test_a_sub_world_on_ranks_2_3_looks_like_a_launch_of_its_own(run):
    _, _, seen = run
    launch = seen["w4.2"]
    for local, launched_as in enumerate((2, 3)):
        mine = seen[f"w2_1.{launched_as}"]
        assert mine["RANK"] == mine["ROLE_RANK"] == str(local)
        assert mine["WORLD_SIZE"] == mine["ROLE_WORLD_SIZE"] == "2"
        assert mine["LOCAL_RANK"] == str(local) and mine["LOCAL_WORLD_SIZE"] == "2"
        assert mine["GROUP_RANK"] == "0" and mine["GROUP_WORLD_SIZE"] == "1"
        assert mine["MASTER_ADDR"] == launch["MASTER_ADDR"]  # its rank 0 is on this host
        assert mine["MASTER_PORT"] not in (launch["MASTER_PORT"], seen["w2_0.0"]["MASTER_PORT"])
        assert mine["TORCHELASTIC_RUN_ID"] == launch["TORCHELASTIC_RUN_ID"] + "-phase1-subworld1"
        assert mine["TORCHELASTIC_USE_AGENT_STORE"] is None
        for kept in ("TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS", "ROLE_NAME"):
            assert mine[kept] == launch[kept] is not None, kept
        # the current CUDA device is cuda:LOCAL_RANK where each launched rank has a GPU;
        # a host with fewer GPUs than ranks (or none) keeps torch's own
        assert mine["cuda"] == mine["expected_cuda"]
    assert seen["w2_1.2"]["MASTER_PORT"] == seen["w2_1.3"]["MASTER_PORT"]


def test_the_whole_world_and_plain_tests_see_the_launcher(run):
    _, _, seen = run
    for r in range(4):
        mine = seen[f"w4.{r}"]
        assert (mine["RANK"], mine["LOCAL_RANK"], mine["WORLD_SIZE"]) == (str(r), str(r), "4")
        assert mine["LOCAL_WORLD_SIZE"] == "4" and mine["GROUP_RANK"] == "0"
        assert mine["TORCHELASTIC_USE_AGENT_STORE"] == "True"
    (plain,) = [v for k, v in seen.items() if k.startswith("plain.")]
    launched_as = next(k for k in seen if k.startswith("plain.")).split(".")[1]
    assert plain["RANK"] == plain["LOCAL_RANK"] == launched_as and plain["WORLD_SIZE"] == "4"
    assert plain["MASTER_PORT"] == seen["w4.0"]["MASTER_PORT"]
    assert plain["TORCHELASTIC_USE_AGENT_STORE"] is None


def test_the_launcher_setting_keeps_each_ranks_local_rank(tmp_path):
    (tmp_path / "test_suite.py").write_text(SUITE)
    (tmp_path / "pytest.ini").write_text("[pytest]\nrankgate_subworld_local_rank = launcher\n")
    notes = tmp_path / "notes"
    notes.mkdir()
    proc = run_torchrun_pytest(
        tmp_path, "-p", "no:randomly", "-q", "--rankgate-timeout=8",
        "--junitxml=out/junit.xml", "test_suite.py::test_w2",
        "test_suite.py::test_local_rank_zero_makes_the_folder",
        ranks=4, env={**os.environ, "SUBWORLD_NOTES": str(notes)}, timeout=240,
    )  # fmt: skip
    seen = {p.name.removesuffix(".json"): json.loads(p.read_text()) for p in notes.glob("*.json")}
    mine = seen["w2_1.3"]
    assert (mine["RANK"], mine["LOCAL_RANK"], mine["LOCAL_WORLD_SIZE"]) == ("1", "3", "4")
    # the price: no rank of ranks 2, 3 has local rank 0, so "once per host" code waits
    outcomes = verdicts(tmp_path)
    assert outcomes["test_local_rank_zero_makes_the_folder[1]"] == {2: "failure", 3: "failure"}
    assert outcomes["test_local_rank_zero_makes_the_folder[0]"] == {0: "passed", 1: "passed"}
    assert proc.returncode != 0
