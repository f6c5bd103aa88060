"""How a dispatched job ended, in one vocabulary for every target.

A job moves through phases (queued, running) and ends in exactly one
:class:`JobOutcome`. Each SLURM job state and each interLink failure class has its own
outcome, so a report never says "failed" for a job that was really preempted,
killed for memory or never left the queue. Whether the *tests* passed is a second,
separate question, answered by the merged per-rank results (:mod:`.job_result`).
"""

from __future__ import annotations

import enum
import re


class Phase(enum.Enum):
    """Where a job is while it has not ended."""

    QUEUED = "queued"
    RUNNING = "running"


class JobOutcome(enum.Enum):
    """How a job ended. Values are the words printed in reports."""

    COMPLETED = "completed"
    """Every task exited 0 (SLURM COMPLETED, pod Succeeded)."""
    FAILED = "failed"
    """A task exited non-zero, usually a failing test (SLURM FAILED, pod Failed)."""
    TIMEOUT = "timeout"
    """Killed by the scheduler's time limit (SLURM TIMEOUT)."""
    CANCELLED = "cancelled"
    """Cancelled by someone else (scancel, an admin, a dependency)."""
    NODE_FAIL = "node-fail"
    """A node of the job died (SLURM NODE_FAIL, BOOT_FAIL)."""
    OUT_OF_MEMORY = "out-of-memory"
    """A task hit its memory limit (SLURM OUT_OF_MEMORY, container OOMKilled)."""
    PREEMPTED = "preempted"
    """The scheduler took the resources for another job (SLURM PREEMPTED)."""
    START_ERROR = "start-error"
    """The job was accepted but its container never started (image pull, bad config)."""
    API_ERROR = "api-error"
    """The target's API stopped answering while rankgate watched the job."""
    SUBMIT_ERROR = "submit-error"
    """The job was never accepted (sbatch or the API refused it); the message is verbatim."""
    DEADLINE = "deadline"
    """rankgate's own deadline passed and rankgate cancelled the job."""
    UNSCHEDULABLE = "unschedulable"
    """The scheduler says the job can never start as asked (SLURM's PartitionConfig,
    PartitionNodeLimit ...: more tasks, nodes or time than the partition gives);
    rankgate cancelled it."""
    QUEUE_TIMEOUT = "queue-timeout"
    """rankgate's queue deadline passed before the job started; rankgate cancelled it."""
    RUN_TIMEOUT = "run-timeout"
    """rankgate's run deadline passed while the job ran; rankgate cancelled it."""
    INTERRUPTED = "interrupted"
    """rankgate was interrupted (Ctrl-C, SIGTERM) and cancelled the job."""
    LOST = "lost"
    """The job disappeared without a final state (purged, pod deleted, API gone)."""
    OTHER = "other"
    """A final state rankgate has no word for; the report carries the raw state."""

    @property
    def infrastructure(self) -> bool:
        """True when the job did not end by its own tests (everything but completed/failed)."""
        return self not in (JobOutcome.COMPLETED, JobOutcome.FAILED)


# SLURM job state (squeue %T / scontrol JobState / sacct State) -> phase or outcome.
SLURM_STATES: dict[str, Phase | JobOutcome] = {
    "PENDING": Phase.QUEUED,
    "CONFIGURING": Phase.QUEUED,
    "REQUEUED": Phase.QUEUED,
    "REQUEUE_HOLD": Phase.QUEUED,
    "REQUEUE_FED": Phase.QUEUED,
    "RESV_DEL_HOLD": Phase.QUEUED,
    "SUSPENDED": Phase.QUEUED,
    "RUNNING": Phase.RUNNING,
    "COMPLETING": Phase.RUNNING,
    "STAGE_OUT": Phase.RUNNING,
    "SIGNALING": Phase.RUNNING,
    "RESIZING": Phase.RUNNING,
    "COMPLETED": JobOutcome.COMPLETED,
    "FAILED": JobOutcome.FAILED,
    "TIMEOUT": JobOutcome.TIMEOUT,
    "CANCELLED": JobOutcome.CANCELLED,
    "NODE_FAIL": JobOutcome.NODE_FAIL,
    "BOOT_FAIL": JobOutcome.NODE_FAIL,
    "OUT_OF_MEMORY": JobOutcome.OUT_OF_MEMORY,
    "PREEMPTED": JobOutcome.PREEMPTED,
    "DEADLINE": JobOutcome.TIMEOUT,
}


def slurm_state(raw: str) -> Phase | JobOutcome:
    """Map a SLURM state (``CANCELLED by 0``, ``COMPLETED+`` ...) to a phase or outcome."""
    word = raw.strip().split()[0].rstrip("+") if raw.strip() else ""
    return SLURM_STATES.get(word, JobOutcome.OTHER)


# Pending reasons (squeue %r, scontrol Reason) after which SLURM will never start the
# job as submitted: the partition, account or QOS cannot give what one job asks for.
# Reasons that clear by themselves (Resources, Priority, ReqNodeNotAvail, held jobs,
# per-user limits) are left to the queue deadline.
NEVER_STARTS = frozenset(
    {
        "PartitionConfig",
        "PartitionNodeLimit",
        "PartitionTimeLimit",
        "BadConstraints",
        "DependencyNeverSatisfied",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",
        "QOSNotAllowed",
    }
)
_PER_JOB_LIMIT = re.compile(r"^(?:Assoc|QOS)Max\w*PerJob\w*$|^QOSMin\w+$")


def slurm_never_starts(reason: str) -> bool:
    """True when a pending job's reason means SLURM will never start it as submitted."""
    word = reason.strip()
    return word in NEVER_STARTS or bool(_PER_JOB_LIMIT.match(word))
