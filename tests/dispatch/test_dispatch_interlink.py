"""interLink target: the pod, the REST contract, results through the logs, every failure class.

The REST tests talk to a real local HTTP server (fake_interlink.py) that validates
each request against interLink's OpenAPI spec and runs each pod's command for real.
"""

from __future__ import annotations

import json
import os
import signal
import urllib.parse

import pytest

# The fake API checks every request against interLink's OpenAPI spec with this validator
# (the [dev] extra); without it these tests skip rather than fail collection.
pytest.importorskip("openapi_schema_validator", reason="needs the [dev] extra")

from fake_interlink import TOKEN, Spec

from rankgate.dispatch.archive import ArchiveError, pack, unpack
from rankgate.dispatch.interlink.backends import KubeBackend, RestBackend, classify
from rankgate.dispatch.interlink.canary import run_canary
from rankgate.dispatch.interlink.manifest import build_pod, pod_script
from rankgate.dispatch.interlink.rest import InterlinkAPIError, InterlinkREST
from rankgate.dispatch.interlink.target import InterlinkTarget
from rankgate.dispatch.job import JobSpec
from rankgate.dispatch.job_outcome import JobOutcome, Phase
from rankgate.dispatch.job_result import render_report
from rankgate.dispatch.profile import ProfileError, profile_from_dict
from rankgate.dispatch.run import describe_stage, run_stage

pytestmark = pytest.mark.unit


def _pod(profile_data, **overrides):
    profile = profile_from_dict({**profile_data, **overrides}, name="site")
    job = JobSpec(job_dir="/tmp/rankgate-x", pytest_args=("-m", "gpu"), workdir=profile.workdir)
    pod = build_pod(profile, name="rankgate-gpu-1", stage="gpu", script=pod_script(profile, job))
    pod["metadata"]["uid"] = "0d7c6a38-0c2e-4a5f-9a57-1a2b3c4d5e6f"
    return pod


# --- the pod -------------------------------------------------------------------------------


def test_pod_targets_the_virtual_node_with_the_plugin_annotations(interlink_profile):
    pod = _pod(
        interlink_profile,
        gpus_per_node=4,
        account="proj",
        qos="normal",
        modules=["cuda/12.8"],
        pre_exec=["source /opt/venv/bin/activate"],
        container={
            "runtime": "singularity",
            "image": "/images/r.sif",
            "options": ["--cleanenv"],
            "mounts": ["/ceph/data:/data"],
        },
    )
    spec = pod["spec"]
    assert spec["nodeSelector"] == {"kubernetes.io/hostname": "vega-new-vk"}
    assert spec["tolerations"] == [
        {"key": "virtual-node.interlink/no-schedule", "operator": "Exists", "effect": "NoSchedule"}
    ]
    assert spec["restartPolicy"] == "Never"
    assert spec["containers"][0]["resources"]["limits"] == {"cpu": "2", "nvidia.com/gpu": "4"}
    assert pod["metadata"]["annotations"] == {
        "slurm-job.vk.io/flags": "--nodes=1 --ntasks-per-node=2 --cpus-per-task=1 "
        "--gres=gpu:4 --time=00:10:00 "
        "--partition=gpu --account=proj --qos=normal",
        "slurm-job.vk.io/pre-exec": "module load cuda/12.8 && source /opt/venv/bin/activate",
        "slurm-job.vk.io/singularity-options": "--nv --cleanenv",
        "slurm-job.vk.io/singularity-mounts": "--bind /ceph/data:/data",
    }


def test_cpu_limit_and_flags_ask_slurm_for_the_same_cpus(interlink_profile):
    # The pod's limit is cpus_per_task * tasks_per_node; without --cpus-per-task SLURM
    # would give each task one CPU whatever the limit says.
    pod = _pod(interlink_profile, cpus_per_task=8)
    assert pod["spec"]["containers"][0]["resources"]["limits"] == {"cpu": "16"}
    flags = pod["metadata"]["annotations"]["slurm-job.vk.io/flags"].split(" ")
    assert "--ntasks-per-node=2" in flags and "--cpus-per-task=8" in flags


def test_pod_is_a_valid_kubernetes_v1pod(interlink_profile):
    """Round trip through the official client's models: every key known, every type right."""
    pod = _pod(interlink_profile, gpus_per_node=1, env={"NCCL_DEBUG": "WARN"})
    client = pytest.importorskip("kubernetes.client", reason="needs the [dev] extra").ApiClient()
    model = client.deserialize(json.dumps(pod), "V1Pod", "application/json")
    assert model.spec.tolerations[0].key == "virtual-node.interlink/no-schedule"
    assert client.sanitize_for_serialization(model) == pod


def test_pod_matches_the_interlink_spec_strictly(interlink_profile):
    body = {
        "pod": _pod(interlink_profile),
        "configmaps": [],
        "secrets": [],
        "projectedvolumesmaps": [],
    }
    assert Spec().errors("/create", "request", body, strict=True) == []


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        ({"nodes": 2}, "use nodes = 1"),
        ({"container": {"runtime": "none"}}, r"need \[container\] image"),
        ({"workdir": ""}, "need workdir"),
        ({"sbatch_options": ["--exclude gn42"]}, "contain spaces"),
    ],
)
def test_profiles_the_pod_cannot_honour_are_refused(interlink_profile, overrides, expected):
    with pytest.raises(ProfileError, match=expected):
        _pod(interlink_profile, **overrides)


# --- status classes ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("state", "expected"),
    [
        ({"waiting": {"reason": "PodPending"}}, Phase.QUEUED),
        ({"running": {}}, Phase.RUNNING),
        ({"terminated": {"exitCode": 0}}, JobOutcome.COMPLETED),
        ({"terminated": {"exitCode": 1, "reason": "Error"}}, JobOutcome.FAILED),
        ({"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, JobOutcome.OUT_OF_MEMORY),
        ({"waiting": {"reason": "ErrImagePull"}}, JobOutcome.START_ERROR),
    ],
)
def test_container_states_classify(state, expected):
    assert classify({"name": "rankgate", "state": state}).status is expected


# --- the REST contract ---------------------------------------------------------------------


def test_every_endpoint_speaks_the_spec(interlink, interlink_profile):
    interlink.queue_delay = 60  # keep the pod queued: its log stays empty
    client = InterlinkREST(interlink.url, interlink.token_file)
    pod = _pod(interlink_profile)
    assert json.loads(client.ping()) == {"status": "ok"}
    client.create(pod)
    (status,) = client.status([pod])
    assert status["UID"] == pod["metadata"]["uid"]
    assert client.logs(pod) == ""
    client.delete(pod)
    assert interlink.violations == []  # requests strictly, answers leniently
    used = [(r["method"], r["path"]) for r in interlink.requests]
    assert used == [
        ("POST", "/pinglink"),
        ("POST", "/create"),
        ("GET", "/status"),
        ("GET", "/getLogs"),
        ("POST", "/delete"),
    ]
    status_req, logs_req = interlink.requests[2], interlink.requests[3]
    assert status_req["body"][0]["metadata"]["name"] == "rankgate-gpu-1"  # GET with a body
    assert logs_req["body"]["PodUID"] == pod["metadata"]["uid"]
    assert logs_req["body"]["ContainerName"] == "rankgate"
    assert {r["authorization"] for r in interlink.requests} == {f"Bearer {TOKEN}"}


def test_a_rejected_token_never_appears_in_the_error(interlink, tmp_path):
    wrong = tmp_path / "wrong-token"
    wrong.write_text("rg-wrong-secret-1234\n")
    with pytest.raises(InterlinkAPIError) as info:
        InterlinkREST(interlink.url, wrong).ping()
    assert info.value.status == 401
    assert "rg-wrong-secret-1234" not in str(info.value)
    assert "Bearer <token>" in str(info.value)  # the echo was there, redacted


@pytest.mark.parametrize(
    ("misbehave", "status", "said"),
    [
        ("echo-error", 500, "internal error while handling Bearer <token>"),
        ("echo-text", 200, "not JSON: '<html>signed in as Bearer <token></html>'"),
    ],
)
def test_a_token_the_server_echoes_is_redacted(
    interlink, interlink_profile, misbehave, status, said
):
    interlink.misbehave = misbehave
    with pytest.raises(InterlinkAPIError) as info:
        InterlinkREST(interlink.url, interlink.token_file).create(_pod(interlink_profile))
    assert info.value.status == status
    assert TOKEN not in str(info.value) and TOKEN not in info.value.body
    assert said in str(info.value)


# A token with characters that URL-encoding changes, as base64 tokens have.
ENCODABLE = "rg/Tok+en=5f0c1e9d7a88b2"


@pytest.mark.parametrize(
    "echo",
    [
        lambda t: urllib.parse.quote(t, safe=""),
        lambda t: urllib.parse.quote(t, safe="").lower(),
        lambda t: urllib.parse.quote_plus(t),
        str.upper,
        str.lower,
        lambda t: t[:12] + "...",
        lambda t: urllib.parse.quote(t, safe="")[:10] + "...",
    ],
    ids=[
        "url-encoded",
        "url-encoded-lower",
        "quote-plus",
        "upper",
        "lower",
        "prefix-12",
        "encoded-prefix-10",
    ],
)
def test_a_token_echoed_in_another_form_is_redacted(interlink, interlink_profile, tmp_path, echo):
    interlink.token, interlink.misbehave, interlink.echo = ENCODABLE, "echo-json", echo
    (tmp_path / "encodable").write_text(ENCODABLE + "\n")
    with pytest.raises(InterlinkAPIError) as info:
        InterlinkREST(interlink.url, tmp_path / "encodable").create(_pod(interlink_profile))
    echoed = echo(ENCODABLE).removesuffix("...")
    assert info.value.status == 500
    assert echoed not in str(info.value) and echoed[:8] not in str(info.value)
    assert '"message": "rejected <token>' in str(info.value)


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("rg-line-one\nrg-line-two\n", "holds 2 lines"),
        ("\n\n", "is empty"),
        ("rg-token with-space\n", "holds spaces, control or non-ASCII characters"),
    ],
)
def test_a_token_file_that_is_not_one_token_is_refused_unseen(
    interlink, tmp_path, content, problem
):
    path = tmp_path / "token"
    path.write_text(content)
    with pytest.raises(InterlinkAPIError) as info:
        InterlinkREST(interlink.url, path).ping()
    said = str(info.value)
    assert f"token file {path} {problem}: it must hold the bearer token alone, on one line" in said
    assert "rg-line" not in said and "rg-token" not in said
    assert interlink.requests == []  # nothing was sent


def test_a_redirect_is_refused_not_followed_with_the_token(interlink, interlink_profile):
    interlink.misbehave = "redirect"
    with pytest.raises(InterlinkAPIError, match="refused to follow a redirect to '/moved'") as info:
        InterlinkREST(interlink.url, interlink.token_file).status([_pod(interlink_profile)])
    assert info.value.status == 302
    assert [r["path"] for r in interlink.requests] == ["/status"]  # /moved never asked


def test_kube_error_bodies_are_redacted(interlink, interlink_profile, kubeconfig, capsys):
    interlink.misbehave = "echo-error"
    profile = _profile(
        interlink_profile,
        target="interlink-kube",
        interlink={"kubeconfig": str(kubeconfig), "namespace": "ci"},
    )
    backend = KubeBackend.from_profile(profile)
    with pytest.raises(InterlinkAPIError) as info:
        backend.submit(_pod(interlink_profile))
    assert info.value.status == 500
    assert TOKEN not in str(info.value)
    assert "internal error while handling Bearer <token>" in str(info.value)
    # The same through the whole dispatch: no output carries it.
    result = run_stage(
        profile,
        stage="gpu",
        pytest_args=["-m", "gpu"],
        target=InterlinkTarget(profile, backend),
    )
    assert result.outcome is JobOutcome.SUBMIT_ERROR
    out = capsys.readouterr()
    assert TOKEN not in render_report(result) + out.out + out.err


# --- results through the logs --------------------------------------------------------------


def test_archive_round_trip_through_noisy_logs(tmp_path):
    src = tmp_path / "results"
    (src / "sub").mkdir(parents=True)
    (src / "junit.rank0.xml").write_text("<testsuites/>")
    (src / "sub" / "rank1.log").write_bytes(bytes(range(256)) * 100)
    logs = "pytest says hello\n" + pack(src) + "rankgate: done\n"
    dest = tmp_path / "back"
    assert sorted(unpack(logs, dest)) == ["junit.rank0.xml", "sub/rank1.log"]
    assert (dest / "sub" / "rank1.log").read_bytes() == bytes(range(256)) * 100


def _flip_one_character(block: str) -> str:
    lines = block.split("\n")
    body = lines[1]
    lines[1] = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
    return "\n".join(lines)


@pytest.mark.parametrize(
    ("mangle", "expected"),
    [
        (lambda block: "no archive here\n", "no results archive"),
        (lambda block: block.rsplit("\n", 2)[0], "cut short"),
        (lambda block: _flip_one_character(block), "corrupt"),
    ],
)
def test_a_bad_archive_says_what_went_wrong(tmp_path, mangle, expected):
    (tmp_path / "f").write_text("x" * 1000)
    with pytest.raises(ArchiveError, match=expected):
        unpack(mangle(pack(tmp_path)), tmp_path / "out")


# --- the watcher's failure classes, for real against the fake API -------------------------


def _profile(interlink_profile, **overrides):
    data = {**interlink_profile, **overrides}
    data["interlink"] = {**interlink_profile["interlink"], **overrides.get("interlink", {})}
    return profile_from_dict(data, name="site")


def test_queue_deadline(interlink, interlink_profile, tmp_path):
    interlink.queue_delay = 60
    profile = _profile(interlink_profile, interlink={"queue_timeout": 1})
    result = run_stage(profile, stage="gpu", pytest_args=[], local_dir=tmp_path / "r")
    assert result.outcome is JobOutcome.QUEUE_TIMEOUT
    assert interlink.deleted and not interlink.pods  # never left behind


def test_start_error(interlink, interlink_profile, tmp_path):
    profile = _profile(interlink_profile, container={"image": "docker://missing/image"})
    result = run_stage(profile, stage="gpu", pytest_args=[], local_dir=tmp_path / "r")
    assert result.outcome is JobOutcome.START_ERROR and "image not found" in result.message


def test_api_error_while_watching(interlink, interlink_profile, tmp_path):
    interlink.fail_status = True
    result = run_stage(
        _profile(interlink_profile), stage="gpu", pytest_args=[], local_dir=tmp_path / "r"
    )
    assert result.outcome is JobOutcome.API_ERROR
    assert "HTTP 500: status backend down" in result.message


def test_pod_that_vanishes_is_lost(interlink, interlink_profile, tmp_path):
    interlink.forget_pods = True
    result = run_stage(
        _profile(interlink_profile), stage="gpu", pytest_args=[], local_dir=tmp_path / "r"
    )
    assert result.outcome is JobOutcome.LOST


def test_refused_create_is_a_submit_error(interlink, interlink_profile, tmp_path):
    (tmp_path / "bad-token").write_text("nope")
    profile = _profile(interlink_profile, interlink={"token_file": str(tmp_path / "bad-token")})
    result = run_stage(profile, stage="gpu", pytest_args=[], local_dir=tmp_path / "r")
    assert result.outcome is JobOutcome.SUBMIT_ERROR and "HTTP 401" in result.message


class InterruptedWhileFetchingLogs(RestBackend):
    """Ctrl-C lands while the logs are being fetched."""

    def logs(self, pod: dict) -> str:
        os.kill(os.getpid(), signal.SIGINT)
        return super().logs(pod)


def test_ctrl_c_while_fetching_logs_still_deletes_the_pod(interlink, interlink_profile, tmp_path):
    backend = InterruptedWhileFetchingLogs(InterlinkREST(interlink.url, interlink.token_file))
    profile = _profile(interlink_profile)
    result = run_stage(
        profile,
        stage="gpu",
        pytest_args=["-m", "gpu"],
        target=InterlinkTarget(profile, backend),
        local_dir=tmp_path / "r",
    )
    assert result.outcome is not JobOutcome.SUBMIT_ERROR
    assert interlink.deleted and not interlink.pods


class InterruptedWhileCreating(RestBackend):
    """Ctrl-C lands while the pod is being created."""

    def submit(self, pod: dict) -> None:
        os.kill(os.getpid(), signal.SIGINT)
        super().submit(pod)


def test_ctrl_c_while_creating_the_pod_deletes_it(interlink, interlink_profile, tmp_path):
    interlink.queue_delay = 60
    backend = InterruptedWhileCreating(InterlinkREST(interlink.url, interlink.token_file))
    profile = _profile(interlink_profile)
    result = run_stage(
        profile,
        stage="gpu",
        pytest_args=[],
        target=InterlinkTarget(profile, backend),
        local_dir=tmp_path / "r",
    )
    assert result.outcome is JobOutcome.INTERRUPTED
    assert interlink.deleted and not interlink.pods


def test_canary_checks_success_failure_and_timeout(interlink, interlink_profile):
    checks = run_canary(_profile(interlink_profile), run_timeout_s=2, poll_s=0.2)
    assert [(c.name, c.got, c.ok) for c in checks] == [
        ("succeed", JobOutcome.COMPLETED, True),
        ("fail", JobOutcome.FAILED, True),
        ("timeout", JobOutcome.RUN_TIMEOUT, True),
    ]
    assert checks[1].detail == "exit 3"
    assert not interlink.pods and interlink.violations == []


def test_dry_run_prints_the_pod_without_the_token(interlink_profile):
    out = describe_stage(_profile(interlink_profile), stage="gpu", pytest_args=[])
    assert json.loads(out)["kind"] == "Pod" and TOKEN not in out


def test_rest_backend_reports_a_pod_it_cannot_find(interlink, interlink_profile):
    backend = RestBackend(InterlinkREST(interlink.url, interlink.token_file))
    assert backend.observe(_pod(interlink_profile)) is None


def test_canary_command(interlink, interlink_profile, tmp_path, capsys):
    from rankgate.cli import main

    path = tmp_path / "vega.toml"
    data = {**interlink_profile, "interlink": {**interlink_profile["interlink"]}}
    lines = [f"{k} = {json.dumps(v)}" for k, v in data.items() if not isinstance(v, dict)]
    for table in ("container", "interlink"):
        lines.append(f"[{table}]")
        lines += [f"{k} = {json.dumps(v)}" for k, v in data[table].items()]
    path.write_text("\n".join(lines) + "\n")
    code = main(
        ["dispatch", "--profile", str(path), "--canary", "--run-timeout", "2", "--poll", "0.2"]
    )
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    assert out.out.splitlines() == [
        "ok   canary succeed: expected completed, got completed (exit 0)",
        "ok   canary fail: expected failed, got failed (exit 3)",
        "ok   canary timeout: expected run-timeout, got run-timeout (running)",
    ]
    assert TOKEN not in out.out + out.err


def test_kubernetes_backend_runs_the_canary_over_the_kube_api(
    interlink, interlink_profile, kubeconfig
):
    profile = _profile(
        interlink_profile,
        target="interlink-kube",
        interlink={"kubeconfig": str(kubeconfig), "namespace": "ci"},
    )
    checks = run_canary(profile, run_timeout_s=2, poll_s=0.2)
    assert [(c.name, c.ok) for c in checks] == [
        ("succeed", True),
        ("fail", True),
        ("timeout", True),
    ], checks
    calls = [(r["method"], r["path"].split("?")[0]) for r in interlink.requests]
    pods = "/api/v1/namespaces/ci/pods"
    created = [r["body"] for r in interlink.requests if r["method"] == "POST"]
    assert created[0]["spec"]["nodeSelector"] == {"kubernetes.io/hostname": "vega-new-vk"}
    name = created[0]["metadata"]["name"]
    # the logs are read before the pod is deleted
    assert calls.index(("GET", f"{pods}/{name}/log")) < calls.index(("DELETE", f"{pods}/{name}"))
    assert {r["authorization"] for r in interlink.requests} == {f"Bearer {TOKEN}"}
    assert not interlink.pods
