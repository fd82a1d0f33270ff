"""The runbook model: one YAML document per protected job.

Every field carries a description: they become the JSON Schema (`lifeboat schema`), the
Prefect UI form, and the rendered Markdown runbook. Cross-field rules that an on-call would
otherwise discover during an incident are checked here, at load time.
"""

from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Literal, Self
from urllib.parse import urlparse

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    PrivateAttr,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from lifeboat_dr.kernel.durations import format_duration, parse_duration
from lifeboat_dr.runbooks.addresses import has_credentials, refused_endpoint

Duration = Annotated[
    timedelta,
    BeforeValidator(parse_duration),
    PlainSerializer(format_duration, return_type=str),
    WithJsonSchema(
        {"type": "string", "pattern": r"^(\d+(\.\d+)?(ms|s|m|h|d))+$|^0$", "examples": ["90s", "15m", "2h"]}
    ),
]

STORE_SCHEMES = ("s3", "gs", "file")


class Workload(StrEnum):
    pretraining = "pretraining"
    finetuning = "finetuning"
    batch_inference = "batch-inference"
    realtime_inference = "realtime-inference"


class Layout(StrEnum):
    auto = "auto"
    dcp = "dcp"
    deepspeed = "deepspeed"
    megatron = "megatron"
    hf = "hf"
    hf_weights = "hf-weights"
    manifest = "manifest"


class Replication(StrEnum):
    """Who copies the primary's checkpoints to the secondary (core/bucket_replication.py)."""

    lifeboat = "lifeboat"  # the replicate flow
    s3_crr = "s3-crr"  # an S3 Cross-Region Replication rule: certify counts what it reports REPLICA
    gcs_dual_region = (
        "gcs-dual-region"  # one GCS dual-region bucket: certify counts what its rpo bound covers
    )


class OnTimeout(StrEnum):
    abort = "abort"
    proceed = "proceed"
    escalate = "escalate"


class Signal(StrEnum):
    gpu_health = "gpu_health"
    training_progress = "training_progress"
    checkpoint_freshness = "checkpoint_freshness"
    provider = "provider"
    alertmanager = "alertmanager"
    endpoint_health = "endpoint_health"  # serving: the primary's own health endpoint, from the control plane
    router_health = "router_health"  # serving: the traffic router's own check of the primary


class _Strict(BaseModel):
    """Unknown keys are errors. A cross-field rule names its field first ("field.path: why")
    so the loader can point at the right YAML line."""

    model_config = ConfigDict(
        extra="forbid",
        use_enum_values=False,
        validate_default=True,
        allow_inf_nan=False,
        hide_input_in_errors=True,  # a value may hold a secret (a URI's credentials): never repeated
    )


class Targets(_Strict):
    """Recovery objectives. Omitted fields come from the workload class."""

    rpo: Duration | None = Field(
        None,
        description="Most work you accept to lose: outage time minus the resumed checkpoint's write time.",
    )
    rto: Duration | None = Field(
        None,
        description="Longest acceptable outage: outage start to the first healthy step on the secondary.",
    )


DEFAULT_TARGETS: dict[Workload, tuple[timedelta, timedelta]] = {
    Workload.pretraining: (timedelta(hours=2), timedelta(minutes=30)),
    Workload.finetuning: (timedelta(hours=4), timedelta(hours=1)),
    Workload.batch_inference: (timedelta(minutes=15), timedelta(minutes=5)),
    Workload.realtime_inference: (timedelta(0), timedelta(seconds=10)),
}


def _one_dual_region_bucket(primary: str, secondary: str, witness: "Witness | None") -> None:
    """`replication: gcs-dual-region`: the bucket is the replica, so both sites name the same
    store, and its one `_lifeboat/lease.json` is where the writers' guarded commits and every
    fence meet (docs/certify.md). A witness in that bucket would be a third vote cast by the
    same bucket."""
    if not primary.startswith("gs://"):
        raise ValueError(
            f"primary.store: replication: gcs-dual-region needs a gs:// store, not {_shown(primary)}"
        )
    if secondary.rstrip("/") != primary.rstrip("/"):
        raise ValueError(
            f"secondary.store: replication: gcs-dual-region reads the checkpoints where the primary wrote "
            f"them, so it must be primary.store {_shown(primary)}, not {_shown(secondary)} (a second lease "
            "there would not be the one the writers commit against)"
        )
    bucket = primary.removeprefix("gs://").split("/", 1)[0]
    if (
        witness is not None
        and witness.store.removeprefix("gs://").split("/", 1)[0] == bucket
        and (witness.store.startswith("gs://"))
    ):
        raise ValueError(
            f"witness.store: {_shown(witness.store)} is in the sites' dual-region bucket gs://{bucket}: "
            "a witness must live in a third place, not cast a second vote for that bucket"
        )


def _shown(url: str) -> str:
    """`url` for an error message, unless it carries credentials (then never repeated)."""
    return "the URL (it carries credentials)" if has_credentials(url) else repr(url)


def _check_store_uri(uri: object) -> str:
    if not isinstance(uri, str):
        raise ValueError(f"{uri!r} is not a store URI; write a string like s3://bucket/prefix")
    if has_credentials(uri):
        raise ValueError(
            "a store URI carries no credentials (user:password@); give them to the SDK's own "
            "configuration (AWS_PROFILE, GOOGLE_APPLICATION_CREDENTIALS)"
        )
    parsed = urlparse(uri)
    if parsed.scheme not in STORE_SCHEMES:
        raise ValueError(
            f"{uri!r} is not a store URI; use s3://bucket/prefix, gs://bucket/prefix or file:///path"
        )
    if not (parsed.netloc or parsed.path.strip("/")):
        raise ValueError(f"{uri!r} names no bucket or path")
    return uri


StoreUri = Annotated[
    str,
    BeforeValidator(_check_store_uri),
    Field(examples=["s3://bucket/prefix", "gs://bucket/prefix", "file:///data/ckpt"]),
]


class Candidate(_Strict):
    """One place the secondary may run, in order of preference."""

    infra: str = Field(
        description="SkyPilot infra string: aws/us-west-2, gcp/us-central1, k8s/my-context, or `local`."
    )
    accelerators: str | None = Field(
        None, description="SkyPilot accelerator spec, e.g. H100:8. Defaults to the job task's."
    )
    instance_type: str | None = Field(None, description="Pin an instance type, e.g. p5.48xlarge.")
    use_spot: bool = Field(False, description="Spot/preemptible capacity: cheaper, may be reclaimed.")


class Site(_Strict):
    """Where a copy of the job runs and keeps its checkpoints."""

    infra: str = Field(
        description="SkyPilot infra string (aws/us-east-1, gcp/us-central1, k8s/ctx) or `local` for the local provider."
    )
    store: StoreUri = Field(
        description="Checkpoint store URI: s3://bucket/prefix, gs://bucket/prefix or file:///path (relative file:// paths resolve against the runbook's folder)."
    )
    endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint (Cloudflare R2, MinIO); only for s3:// stores."
    )
    cluster: str | None = Field(
        None,
        description="Name of the job's cluster on this site (SkyPilot); fencing stops it when it answers.",
    )

    @field_validator("infra")
    @classmethod
    def _infra_shape(cls, v: str) -> str:
        if v != "local" and not v.split("/")[0]:
            raise ValueError("infra must look like cloud/region, e.g. aws/us-east-1, or be `local`")
        return v

    @model_validator(mode="after")
    def _endpoint_only_for_s3(self) -> Self:
        if self.endpoint_url and not self.store.startswith("s3://"):
            raise ValueError("endpoint_url: applies to s3:// stores only")
        return self


class Witness(_Strict):
    """A third store that holds only the site state (`_lifeboat/lease.json`), in a third
    failure domain. With one, every fence must reach a majority of the three stores and the
    site state is known when a majority answers: a failback can fence, and replication and
    certification can read the site state, while the secondary's store is down."""

    store: StoreUri = Field(
        description="The witness store URI: s3://bucket/prefix, gs://bucket/prefix or file:///path."
    )
    endpoint_url: str | None = Field(
        None, description="S3-compatible endpoint (Cloudflare R2, MinIO); only for s3:// stores."
    )

    @model_validator(mode="after")
    def _endpoint_only_for_s3(self) -> Self:
        if self.endpoint_url and not self.store.startswith("s3://"):
            raise ValueError("endpoint_url: applies to s3:// stores only")
        return self


class SecondarySite(Site):
    candidates: list[Candidate] = Field(
        description="Ordered fallback list of where to provision; the first with capacity wins."
    )

    @field_validator("candidates")
    @classmethod
    def _not_empty(cls, v: list[Candidate]) -> list[Candidate]:
        if not v:
            raise ValueError("the candidate list is empty: name at least one infra to fail over to")
        return v


class ResumeArg(_Strict):
    """How the job learns which checkpoint to resume from. Give exactly one."""

    env: str | None = Field(
        None, description="Environment variable set to the checkpoint URI, e.g. RESUME_FROM."
    )
    arg: str | None = Field(
        None, description="Argument template appended to the command, e.g. `--resume {checkpoint}`."
    )

    @model_validator(mode="after")
    def _exactly_one(self) -> Self:
        if bool(self.env) == bool(self.arg):
            raise ValueError("env: give exactly one of env or arg")
        if self.arg and "{checkpoint}" not in self.arg:
            raise ValueError("arg: must contain {checkpoint}")
        return self


class ManagedJob(_Strict):
    """Run the job as a SkyPilot managed job: SkyPilot's jobs controller relaunches it when
    spot capacity is reclaimed or it fails, with this recovery strategy."""

    strategy: Literal["FAILOVER", "EAGER_NEXT_REGION"] = Field(
        "FAILOVER",
        description="SkyPilot job_recovery strategy: FAILOVER retries the same region first, EAGER_NEXT_REGION moves on at once.",
    )
    max_restarts_on_errors: int = Field(
        3, ge=0, description="Restarts SkyPilot allows when the job itself fails (not a preemption)."
    )

    def job_recovery(self) -> dict:
        """SkyPilot's `resources.job_recovery` value."""
        return {"strategy": self.strategy, "max_restarts_on_errors": self.max_restarts_on_errors}


class TrainingGuardPolicy(_Strict):
    """The training guard's watchdog (`lifeboat_dr.core.guard`), passed to the job Lifeboat
    starts as $LIFEBOAT_HANG_MULTIPLE and $LIFEBOAT_HANG_FLOOR_S."""

    hang_multiple: float = Field(
        10.0, gt=1, le=1000, description="A step running longer than this x the recent median step is a hang."
    )
    hang_floor: Duration = Field(
        timedelta(seconds=5),
        description="Never call a step shorter than this a hang (noise on millisecond steps).",
    )

    def env(self) -> dict[str, str]:
        return {
            "LIFEBOAT_HANG_MULTIPLE": f"{self.hang_multiple:g}",
            "LIFEBOAT_HANG_FLOOR_S": f"{self.hang_floor.total_seconds():g}",
        }


class Job(_Strict):
    """The training or serving job to restart on the secondary."""

    task: str | None = Field(None, description="The user's SkyPilot task YAML, relative to the runbook.")
    command: str | None = Field(
        None, description="Shell command for the local provider (embedded default, demos, CI)."
    )
    resume: ResumeArg = Field(
        default_factory=lambda: ResumeArg(env="LIFEBOAT_RESUME_FROM"),
        description="How the certified checkpoint is passed to the job.",
    )
    workdir: str | None = Field(
        None, description="Working directory of the local command, relative to the runbook."
    )
    managed: ManagedJob | None = Field(
        None,
        description="Launch the task as a SkyPilot managed job (its controller recovers preemptions); omitted: a plain cluster.",
    )
    guard: TrainingGuardPolicy | None = Field(
        None, description="The training guard's hang watchdog for the job (omitted: the guard's defaults)."
    )

    @model_validator(mode="after")
    def _task_or_command(self) -> Self:
        if not (self.task or self.command):
            raise ValueError("task: give a SkyPilot `task` YAML or a local `command`")
        return self


class Retention(_Strict):
    keep_last: int = Field(3, ge=1, description="Keep the newest K checkpoints.")
    keep_every: int | None = Field(
        None, ge=1, description="Also keep every checkpoint whose step is a multiple of N."
    )


class Checkpoint(_Strict):
    layout: Layout = Field(
        Layout.auto,
        description="Checkpoint layout: auto, dcp, deepspeed, megatron, hf (Trainer), hf-weights (save_pretrained) or manifest.",
    )
    cadence: Duration = Field(description="How often the job writes a checkpoint.")
    freshness_factor: float = Field(
        3.0, gt=1, le=1000, description="A checkpoint older than cadence x this counts as stale."
    )
    retention: Retention = Field(
        default_factory=Retention, description="What replication keeps on the secondary."
    )


class Image(_Strict):
    image: str = Field(description="Container image reference, e.g. nvcr.io/nvidia/pytorch:24.05-py3.")
    digest: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Expected manifest digest where the secondary pulls from.",
    )


class Prestage(_Strict):
    # Empty lists and maps are plain defaults (pydantic copies them per runbook): a builtin
    # `default_factory` would cost an `inspect.signature` parse at every start-up.
    images: list[Image] = Field([], description="Container images the secondary needs.")
    weights: list[StoreUri] = Field([], description="Weight or tokenizer URIs copied to the secondary store.")
    mirrors: dict[str, str] = Field(
        {},
        description="Where the secondary pulls images from: registry host -> mirror URL, e.g. nvcr.io: https://us-central1-docker.pkg.dev/acme/nvcr.",
    )
    pull: bool = Field(
        False,
        description="Pre-warm the mirror: fetch every image's manifest and layers through it (digest-checked), not only its manifest digest.",
    )


class Escalation(_Strict):
    approvers: list[str] = Field(description="Slack user IDs asked when the first approvers do not answer.")
    timeout: Duration = Field(timedelta(minutes=10), description="How long the escalation waits.")


class Approval(_Strict):
    required: bool = Field(True, description="Whether a human must approve before GPUs are provisioned.")
    approvers: list[str] = Field([], description="Slack user IDs allowed to approve (U0123ABCD).")
    channel: str | None = Field(None, description="Slack channel ID where the approval card is posted.")
    logins: dict[str, list[str]] = Field(
        {},
        description="Slack user ID -> the logins the identity proxy reports for that person (SSO "
        "email or username): who may decide in the Prefect UI or with `lifeboat approve`.",
    )
    timeout: Duration = Field(timedelta(minutes=15), description="How long to wait for the approvers.")
    escalation: Escalation | None = Field(None, description="Who is asked next when the approvers time out.")
    on_timeout: OnTimeout = Field(
        OnTimeout.abort, description="Policy when nobody answers: abort, proceed or escalate."
    )
    provision_before_approval: bool = Field(
        False, description="Start provisioning while waiting (cheap to tear down, cuts RTO)."
    )

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        if self.required and not self.approvers:
            raise ValueError("approvers: approval is required but no approvers are listed")
        if self.on_timeout is OnTimeout.escalate and not self.escalation:
            raise ValueError("escalation: on_timeout is escalate but no escalation approvers are given")
        named = {*self.approvers, *(self.escalation.approvers if self.escalation else [])}
        if unknown := sorted(set(self.logins) - named):
            raise ValueError(f"logins: not an approver or escalation approver: {', '.join(unknown)}")
        return self


class Detection(_Strict):
    signals: list[Signal] = Field(
        default_factory=lambda: [Signal.gpu_health, Signal.training_progress, Signal.provider],
        description="Independent signals that may confirm an outage.",
    )
    quorum: int = Field(2, ge=1, description="How many signals must agree within the window.")
    window: Duration = Field(
        timedelta(minutes=5), description="How close in time the agreeing signals must be."
    )
    stall_after: Duration = Field(
        timedelta(minutes=10), description="No training step for this long counts as a stall (NCCL hang)."
    )
    heartbeat: str | None = Field(
        None, description="Where the job writes its heartbeat (store URI or file path)."
    )
    provider_endpoint: str | None = Field(
        None,
        description="URL the provider signal pings (the primary region's cloud API, a Kubernetes "
        "API server's /readyz). Default: the primary's store, which the other probes read too, so "
        "a store that stops answering is one vote for all of them.",
    )

    @field_validator("provider_endpoint")
    @classmethod
    def _is_url(cls, v: str | None) -> str | None:
        if v is not None:
            parsed = urlparse(v)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise ValueError(f"{_shown(v)} is not an http(s) URL")
        return v

    @model_validator(mode="after")
    def _quorum_reachable(self) -> Self:
        if len(set(self.signals)) != len(self.signals):
            raise ValueError("signals: a signal is listed twice")
        if self.quorum > len(self.signals):
            raise ValueError(f"quorum: {self.quorum} can never be reached with {len(self.signals)} signal(s)")
        return self


class Verify(_Strict):
    """How the resumed job proves itself."""

    first_step_timeout: Duration = Field(
        timedelta(minutes=20), description="Longest wait for the first healthy step after loading."
    )
    parity_steps: int | None = Field(
        None,
        ge=0,
        description="Resumed steps whose loss is compared with the pre-failure log (0 disables). "
        "Default: 5 when loss_log is named, else 0.",
    )
    parity_tolerance: float = Field(0.0, ge=0, description="Largest relative loss difference accepted.")
    parity_min_coverage: float = Field(
        0.5,
        gt=0,
        le=1,
        description="Least share of the parity_steps asked that must be compared for a pass. Default 0.5: "
        "with parity_steps 5, three steps. Below it the proof is not provable (never a pass): it comes "
        "from a replay of the previous certified checkpoint beside the resumed job.",
    )
    on_parity_failure: Literal["rollback", "page"] = Field(
        "rollback",
        description="On a mismatch (never on not provable): roll back to the previous certified "
        "checkpoint, or stop and page. A mismatch in the replay beside the newest checkpoint pages; "
        "the job keeps training from the newest unless this is page.",
    )
    loss_log: str | None = Field(
        None,
        description="Pre-failure loss log (JSON lines with step and loss), relative to the runbook or a store URI. "
        "Required when parity_steps > 0. Under the primary store, replication copies it to the secondary "
        "and the failover reads that copy.",
    )

    @model_validator(mode="after")
    def _parity_needs_a_loss_log(self) -> Self:
        if self.parity_steps is None:
            self.parity_steps = 5 if self.loss_log else 0
        if self.parity_steps > 0 and not self.loss_log:
            raise ValueError(
                f"loss_log: parity_steps is {self.parity_steps} but no pre-failure loss log is named, so "
                "parity could never be checked; name one (e.g. a loss.jsonl in the primary store) or set parity_steps: 0"
            )
        return self


class Cadences(_Strict):
    """How often `lifeboat deploy`'s scheduled flows run for this runbook. Omitted: derived from the
    targets (RPO: checkpoint cadence + write + replicate period + copy; RTO: the signals' lag + one
    watch + recovery), see `lifeboat_dr.core.cadences`; `lifeboat validate` warns when one set here
    cannot meet them."""

    watch: Duration | None = Field(
        None, description="Period of both vantages' `watch` (probes, quorum); default: from the RTO."
    )
    replicate: Duration | None = Field(
        None,
        description="Period of `replicate` (copies checkpoints to the secondary); default: from the RPO.",
    )
    certify: Duration | None = Field(
        None,
        description="Period of `certify` (certifies the replica, records the RPO); default: from the RPO.",
    )
    loss_log: Duration | None = Field(
        None,
        description="Period of `loss_log` (copies a loss log kept in the primary store to the secondary); "
        "default: a quarter of checkpoint.cadence.",
    )

    @field_validator("watch", "replicate", "certify", "loss_log")
    @classmethod
    def _positive(cls, v: timedelta | None) -> timedelta | None:
        if v is not None and v < timedelta(seconds=1):
            raise ValueError("a scheduled flow runs at most once a second: give 1s or more")
        return v


class FailoverPolicy(_Strict):
    """How the failover flow runs its steps."""

    retries: int = Field(
        2, ge=0, description="Retries of a step that failed on a retryable provider error (throttling, 5xx)."
    )
    retry_delay: Duration = Field(timedelta(seconds=10), description="Wait between retries of a step.")
    step_timeout: Duration = Field(
        timedelta(minutes=30), description="Longest any one step may run before the failover stops."
    )
    expected_ready: Duration = Field(
        timedelta(minutes=15),
        description="Typical time from approval to the first healthy step (provision, load); the approval card's expected RTO uses it.",
    )


class TrafficRouterKind(StrEnum):
    haproxy = "haproxy"
    route53 = "route53"


class Traffic(_Strict):
    """The router in front of the sites: an HAProxy backend or a Route 53 weighted record set."""

    router: TrafficRouterKind = Field(description="haproxy (runtime API) or route53 (weighted DNS records).")
    primary: str = Field(
        description="The primary site at the router: its HAProxy server name or its Route 53 SetIdentifier."
    )
    secondary: str = Field(
        description="The standby site at the router: its HAProxy server name or its Route 53 SetIdentifier."
    )
    socket: str | None = Field(
        None,
        description="HAProxy: the runtime API's stats socket at admin level, a unix path or host:port.",
    )
    backend: str | None = Field(None, description="HAProxy: the backend whose servers are the sites.")
    zone_id: str | None = Field(None, description="Route 53: the hosted zone ID, e.g. Z0123456789ABC.")
    record: str | None = Field(
        None, description="Route 53: the weighted record's name, e.g. chat.example.com."
    )
    record_type: str = Field("A", description="Route 53: the weighted records' type (A, AAAA, CNAME).")
    endpoint_url: str | None = Field(
        None, description="Route 53: another endpoint (tests, a local emulator)."
    )

    @model_validator(mode="after")
    def _router_fields(self) -> Self:
        need = ("socket", "backend") if self.router is TrafficRouterKind.haproxy else ("zone_id", "record")
        missing = [f for f in need if not getattr(self, f)]
        if missing:
            raise ValueError(f"{missing[0]}: the {self.router.value} router needs {' and '.join(need)}")
        if self.primary == self.secondary:
            raise ValueError("secondary: the same router site as primary")
        return self


class Canary(_Strict):
    """One real request the standby must answer, within budget, before it gets traffic."""

    path: str = Field("/v1/infer", description="Path of the canary request on the standby.")
    body: dict = Field(
        default_factory=lambda: {"prompt": "lifeboat canary"},
        description="JSON body of the canary request (POST).",
    )
    latency_budget: Duration = Field(
        timedelta(seconds=2), description="Slowest acceptable answer to the canary (and to the health check)."
    )


class Switch(_Strict):
    """How traffic moves to the standby."""

    steps: list[int] = Field(
        default_factory=lambda: [100],
        description="Percent of traffic on the standby after each step, ending at 100; [100] switches at once.",
    )
    hold: Duration = Field(
        timedelta(seconds=30), description="How long each step but the last is watched before the next."
    )

    @field_validator("steps")
    @classmethod
    def _rising_to_100(cls, v: list[int]) -> list[int]:
        if not v or v[-1] != 100 or any(not 0 < p <= 100 for p in v) or v != sorted(set(v)):
            raise ValueError("steps: rising percentages in 1..100 ending at 100, e.g. [10, 50, 100]")
        return v


class Watch(_Strict):
    """What the standby must hold after the switch; past a threshold, traffic reverts."""

    duration: Duration = Field(
        timedelta(minutes=2), description="How long the standby is watched after the switch."
    )
    interval: Duration = Field(timedelta(milliseconds=200), description="Time between watch requests.")
    window: int = Field(
        20, ge=5, description="Requests in the sliding window that error rate and P99 are judged on."
    )
    max_error_rate: float = Field(
        0.05, ge=0, le=1, description="Highest acceptable share of failed requests in the window."
    )
    max_p99: Duration = Field(
        timedelta(seconds=2), description="Highest acceptable 99th-percentile latency in the window."
    )


class Serving(_Strict):
    """Realtime serving: a hot standby is verified, then traffic moves to it (no provisioning)."""

    traffic: Traffic = Field(description="The router that splits traffic between the sites.")
    primary_url: str = Field(
        description="The primary site's own URL (health probes), e.g. http://10.0.0.1:8000."
    )
    standby_url: str = Field(description="The standby site's own URL: verified before it gets traffic.")
    weights: str | None = Field(
        None,
        description="Store URI of the certified weights the standby must serve; default: the newest certified checkpoint of secondary.store.",
    )
    health_path: str = Field("/healthz", description="Health endpoint on each site (200 = healthy).")
    model_path: str = Field(
        "/v1/model",
        description="Endpoint that reports the served weights' digest as JSON {digest: sha256:...}.",
    )
    canary: Canary = Field(
        default_factory=Canary, description="The request the standby must answer before the switch."
    )
    switch: Switch = Field(default_factory=Switch, description="At once, or by steps with a hold between.")
    watch: Watch = Field(
        default_factory=Watch, description="Error-rate and P99 thresholds that revert the switch."
    )

    @field_validator("primary_url", "standby_url")
    @classmethod
    def _http_url(cls, v: str) -> str:
        if urlparse(v).scheme not in ("http", "https") or not urlparse(v).netloc:
            raise ValueError(f"{_shown(v)} is not an http(s) URL")
        return v.rstrip("/")


class PlanSettings(_Strict):
    """Where the optimizer's prices come from."""

    catalog: Literal["live", "snapshot"] | None = Field(
        None,
        description="live: your SkyPilot setup's enabled clouds and fetched catalogs; snapshot: the catalog shipped with Lifeboat (no network). Omitted: live when `sky check` found enabled clouds, else snapshot.",
    )


class Cluster(_Strict):
    """The cluster's own numbers, for `lifeboat advise`: checkpoint interval and DR budget."""

    gpus: int = Field(ge=1, description="GPUs the job runs on (count).")
    gpu_hour_usd: float = Field(gt=0, description="Price of one GPU-hour, US dollars.")
    mtbf: Duration | None = Field(
        None, description="Cluster mean time between job-stopping failures, e.g. 8h. Give this or gpu_mtbf."
    )
    gpu_mtbf: Duration | None = Field(
        None, description="One GPU's mean time between failures, e.g. 50000h; the cluster's is this / gpus."
    )
    checkpoint_write: Duration = Field(
        description="Time the job is blocked writing one checkpoint (C), e.g. 90s."
    )
    restart: Duration = Field(
        timedelta(0), description="Failure to training again: reschedule, load the checkpoint, warm up (R)."
    )
    checkpoint_size_gb: float | None = Field(
        None, gt=0, description="Size of one checkpoint, GB (10^9 bytes)."
    )
    storage_usd_per_gb_month: float | None = Field(
        None, ge=0, description="Checkpoint storage price on the secondary, US dollars per GB-month."
    )
    transfer_usd_per_gb: float | None = Field(
        None, ge=0, description="Cross-region/provider transfer (egress) price, US dollars per GB."
    )
    replication: Duration = Field(
        timedelta(0), description="Time to copy one checkpoint to the secondary; adds to the RPO."
    )
    standby: Literal["cold", "warm", "hot"] = Field(
        "cold",
        description="Standby tier: cold (provision on demand), warm (a slice of GPUs reserved), hot (a running replica).",
    )
    standby_fraction: float | None = Field(
        None,
        ge=0,
        description="Share of the cluster's GPUs held on standby; default cold 0, warm 0.1, hot 1.",
    )
    standby_gpu_hour_usd: float | None = Field(
        None,
        ge=0,
        description="Price of one standby GPU-hour, US dollars (reserved or discounted); default gpu_hour_usd.",
    )
    provision: Duration | None = Field(
        None, description="Time to get the GPUs running on the secondary at this tier; gives the RTO floor."
    )

    @model_validator(mode="after")
    def _one_failure_rate(self) -> Self:
        if (self.mtbf is None) == (self.gpu_mtbf is None):
            raise ValueError("mtbf: give exactly one of mtbf (cluster) or gpu_mtbf (per GPU)")
        if (self.mtbf or self.gpu_mtbf) <= timedelta(0):
            raise ValueError("mtbf: must be more than 0")
        if self.checkpoint_write <= timedelta(0):
            raise ValueError("checkpoint_write: must be more than 0")
        return self


class GpuQuota(_Strict):
    """GPUs the secondary's account may run at once in one place: a pre-approved service limit."""

    infra: str = Field(
        description="Where the limit applies, cloud/region as in a candidate: gcp/us-central1."
    )
    accelerator: str = Field(
        description="The GPU type as a candidate names it, without the count: H100, A100-80GB, L4."
    )
    gpus: int = Field(
        ge=1,
        description="GPUs allowed at once (an AWS vCPU limit divided by the instance's vCPUs per GPU: p5.48xlarge has 192 for 8).",
    )

    @field_validator("infra")
    @classmethod
    def _cloud_region(cls, v: str) -> str:
        if len([p for p in v.strip("/").split("/") if p]) < 2:
            raise ValueError("infra must look like cloud/region, e.g. gcp/us-central1")
        return v

    @field_validator("accelerator")
    @classmethod
    def _type_only(cls, v: str) -> str:
        if ":" in v or not v.strip():
            raise ValueError("the GPU type alone, e.g. H100; the count goes in gpus")
        return v


class Fleet(_Strict):
    """How this runbook shares the secondary when one outage fails many runbooks over at once
    (`lifeboat capacity`, the fleet planner): realtime inference is placed first, then by
    priority, then by the cost of waiting (GPUs x $/h)."""

    priority: int = Field(0, description="Higher is placed first among runbooks of the same class.")
    quota: list[GpuQuota] = Field(
        [],
        description="The secondary's pre-approved GPU quota per place and GPU type, shared with every "
        "runbook failing over there: the fleet plan never allocates more; a place not listed counts as none.",
    )

    live_quota: bool = Field(
        False,
        description="Also read the secondary's live GPU quota where the cloud's SDK gives it (AWS Service Quotas: "
        "EC2's On-Demand P and G instance vCPUs per region) and plan on the smaller of it and `quota`; a live quota "
        "that cannot be read is planned as declared, and said.",
    )
    lock_store: str | None = Field(
        None,
        description="The store where the runbooks of one failed region group their outages (join markers, "
        "one lock per region, the group record): the same URI for every runbook of that region.",
    )
    group_window: Duration | None = Field(
        None,
        description="How long, after the first confirmed outage of a region, other runbooks' outages join one "
        "fleet failover (by the store's clock), well inside its RTO; each grouped failover stands down naming "
        "the fleet run. Unset: this runbook always fails over alone.",
    )

    @field_validator("group_window")
    @classmethod
    def _positive_window(cls, v: timedelta | None) -> timedelta | None:
        if v is not None and v <= timedelta(0):
            raise ValueError("must be more than 0")
        return v

    @field_validator("quota")
    @classmethod
    def _each_place_once(cls, v: list[GpuQuota]) -> list[GpuQuota]:
        seen = set()
        for q in v:
            key = (q.infra.strip("/").lower(), q.accelerator.lower())
            if key in seen:
                raise ValueError(
                    f"{q.infra} {q.accelerator} is listed twice; give each place and GPU type once"
                )
            seen.add(key)
        return v


RUNGS = ("restart", "relaunch-without-node", "other-zone", "failover")  # smallest recovery first


class Rung(_Strict):
    """One rung of the recovery ladder (`lifeboat_dr.core.guard.ladder`)."""

    rung: Literal["restart", "relaunch-without-node", "other-zone", "failover"] = Field(
        description="restart: the job again on the same cluster from its newest committed checkpoint; "
        "relaunch-without-node: a fresh cluster on the same infra, the failed node's identity recorded; "
        "other-zone: a fresh cluster in one of `zones`; failover: the failover flow (the secondary site)."
    )
    approval: Literal["auto", "wait"] | None = Field(
        None,
        description="auto: the rung acts at once; wait: a person approves it first (default auto). "
        "The failover rung is approved by the runbook's `approval` section: none here.",
    )
    rto: Duration | None = Field(
        None,
        description="This rung's RTO target (default: the runbook's); also how long it waits for health.",
    )
    zones: list[str] = Field(
        [],
        description="other-zone only: SkyPilot infra strings with a zone (aws/us-east-1/us-east-1b), "
        "tried in order; the failed zone is skipped.",
    )

    @model_validator(mode="after")
    def _fits_the_rung(self) -> Self:
        if self.rung == "failover" and self.approval is not None:
            raise ValueError("approval: the failover rung is approved by the runbook's approval section")
        if self.rung == "other-zone" and not self.zones:
            raise ValueError("zones: other-zone needs the zones to relaunch in (aws/us-east-1/us-east-1b)")
        if self.rung != "other-zone" and self.zones:
            raise ValueError(f"zones: only other-zone relaunches in zones, not {self.rung}")
        for zone in self.zones:
            if len(zone.strip("/").split("/")) != 3:
                raise ValueError(f"zones: {zone!r} is not cloud/region/zone")
        return self


class Recovery(_Strict):
    """The smallest recovery that works: rungs tried in order after a training fault, each
    next one when the last failed or the fault says it cannot help."""

    rungs: list[Rung] = Field(
        default_factory=lambda: [Rung(rung="failover")],
        description="Ordered rungs from restart, relaunch-without-node, other-zone, failover "
        "(each at most once, failover last). Omitted: the failover alone.",
    )

    @field_validator("rungs")
    @classmethod
    def _an_order(cls, v: list[Rung]) -> list[Rung]:
        names = [r.rung for r in v]
        if not names:
            raise ValueError("the ladder is empty: name at least one rung (failover, alone, is today's)")
        if dupes := sorted({n for n in names if names.count(n) > 1}):
            raise ValueError(f"{', '.join(dupes)} listed twice: each rung is tried at most once")
        if "failover" in names and names[-1] != "failover":
            raise ValueError("failover must be the last rung: nothing is smaller after it")
        return v

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(r.rung for r in self.rungs)

    def rung(self, name: str) -> Rung:
        return next(r for r in self.rungs if r.rung == name)


class Runbook(_Strict):
    """A protected job and how to fail it over."""

    name: str = Field(
        pattern=r"^[a-z0-9][a-z0-9-]{0,62}$",
        description="Short DNS-safe name; prefixes clusters, leases and ledger entries.",
    )
    description: str = Field("", description="What this job is, for the humans reading the runbook.")
    workload: Workload = Field(description="Workload class; sets the default RPO/RTO targets.")
    targets: Targets = Field(default_factory=Targets, description="Override the workload's default RPO/RTO.")
    primary: Site = Field(description="Where the job normally runs.")
    secondary: SecondarySite = Field(description="Where it fails over to.")
    witness: Witness | None = Field(
        None,
        description="A third site-state store: fences then need a majority of the three, and the site "
        "state stays readable while the secondary's store is down.",
    )
    job: Job
    checkpoint: Checkpoint
    replication: Replication = Field(
        Replication.lifeboat,
        description="Who copies checkpoints primary -> secondary: lifeboat (the replicate flow), s3-crr "
        "(the bucket's Cross-Region Replication rule: replicate copies nothing that way and records its lag, "
        "certification counts only objects the replica's HEAD reports REPLICA) or gcs-dual-region (both sites "
        "name one dual-region bucket: nothing is copied, certification counts only objects older, by the "
        "store's clock, than the bucket's rpo bound: 15m ASYNC_TURBO, 12h DEFAULT).",
    )
    prestage: Prestage = Field(default_factory=Prestage)
    approval: Approval = Field(default_factory=lambda: Approval(required=False))
    detection: Detection = Field(default_factory=Detection)
    verify: Verify = Field(default_factory=Verify)
    failover: FailoverPolicy = Field(
        default_factory=FailoverPolicy, description="Retries and timeouts of the failover's steps."
    )
    recovery: Recovery = Field(
        default_factory=Recovery,
        description="The recovery ladder after a training guard's fault (omitted: the failover alone).",
    )
    cadences: Cadences = Field(
        default_factory=Cadences,
        description="How often the deployed watch, replicate, certify and loss_log run; omitted: derived from the targets.",
    )
    plan: PlanSettings = Field(default_factory=PlanSettings, description="How candidates are priced.")
    cluster: Cluster | None = Field(
        None,
        description="The cluster's own numbers (GPUs, failure rate, checkpoint costs, prices, standby) for `lifeboat advise`.",
    )
    fleet: Fleet = Field(
        default_factory=Fleet,
        description="Priority and the secondary's declared GPU quota, for fleet-wide failover.",
    )
    serving: Serving | None = Field(
        None,
        description="Realtime inference: the router, the standby and how traffic moves (required for realtime-inference).",
    )
    allow_hosts: list[str] = Field(
        [],
        description="Link-local or cloud metadata hosts (169.254.0.0/16, fe80::/10, fd00:ec2::254, "
        "metadata.google.internal) that an endpoint or probe URL may name, by name: refused otherwise, "
        "for such an address answers with the machine's own credentials.",
    )

    _path: Path | None = PrivateAttr(None)

    @model_validator(mode="after")
    def _cross_field(self) -> Self:
        if self.replication is Replication.gcs_dual_region:
            _one_dual_region_bucket(self.primary.store, self.secondary.store, self.witness)
        elif self.primary.store.rstrip("/") == self.secondary.store.rstrip("/"):
            raise ValueError("secondary.store: same as primary.store; a replica must live elsewhere")
        if self.witness is not None and self.witness.store.rstrip("/") in {
            self.primary.store.rstrip("/"),
            self.secondary.store.rstrip("/"),
        }:
            raise ValueError("witness.store: same as a site's store; a witness must live in a third place")
        if self.replication is Replication.s3_crr:
            for field, store in (
                ("primary.store", self.primary.store),
                ("secondary.store", self.secondary.store),
            ):
                if not store.startswith("s3://"):
                    raise ValueError(
                        f"replication: s3-crr replicates S3 to S3, but {field} is {_shown(store)}"
                    )
        if self.secondary.infra == "local" and not self.job.command:
            raise ValueError(
                "job.command: the local provider (secondary.infra: local) runs job.command, which is missing"
            )
        if self.workload is Workload.realtime_inference and self.serving is None:
            raise ValueError(
                "serving: a realtime-inference runbook needs a serving section (router, standby URL): "
                "a 10-second RTO cannot be met by provisioning"
            )
        if self.serving is not None and self.workload is not Workload.realtime_inference:
            raise ValueError("serving: only realtime-inference runbooks move traffic")
        if set(self.recovery.names) - {"failover"} and not self.primary.cluster:
            raise ValueError("primary.cluster: the recovery ladder's rungs act on the job's cluster: name it")
        if self.secondary.infra != "local" and not self.job.task:
            raise ValueError("job.task: a SkyPilot secondary needs job.task (the task YAML)")
        if self.fleet.group_window is not None:
            _fleet_grouping(self.fleet, self.rto_target)
        for field, url in self._endpoints():
            if why := refused_endpoint(url, set(self.allow_hosts)):
                raise ValueError(f"{field}: {why}")
        for field, where in self._locations():
            if "://" in where and has_credentials(where):
                raise ValueError(f"{field}: a URI carries no credentials (user:password@)")
        return self

    def _endpoints(self) -> list[tuple[str, str]]:
        """Every URL Lifeboat calls for this runbook (stores' endpoints, probes, the serving sites)."""
        found = [
            ("primary.endpoint_url", self.primary.endpoint_url),
            ("secondary.endpoint_url", self.secondary.endpoint_url),
            ("detection.provider_endpoint", self.detection.provider_endpoint),
        ]
        if self.serving is not None:
            found += [
                ("serving.traffic.endpoint_url", self.serving.traffic.endpoint_url),
                ("serving.primary_url", self.serving.primary_url),
                ("serving.standby_url", self.serving.standby_url),
            ]
        return [(field, url) for field, url in found if url]

    def _locations(self) -> list[tuple[str, str]]:
        """The other places written as a path or a store URI."""
        found = [("detection.heartbeat", self.detection.heartbeat), ("verify.loss_log", self.verify.loss_log)]
        if self.serving is not None:
            found.append(("serving.weights", self.serving.weights))
        return [(field, where) for field, where in found if where]

    @property
    def rpo_target(self) -> timedelta:
        return self.targets.rpo if self.targets.rpo is not None else DEFAULT_TARGETS[self.workload][0]

    @property
    def rto_target(self) -> timedelta:
        return self.targets.rto if self.targets.rto is not None else DEFAULT_TARGETS[self.workload][1]

    @property
    def path(self) -> Path | None:
        """The YAML file this runbook was loaded from, if any."""
        return self._path

    @property
    def base_dir(self) -> Path:
        return self._path.parent if self._path else Path.cwd()

    def resolve(self, relative: str) -> Path:
        """A path written in the runbook, relative to the runbook's folder."""
        p = Path(relative)
        return p if p.is_absolute() else (self.base_dir / p).resolve()

    def store_uri(self, uri: str) -> str:
        """A store URI with a relative `file://` path made absolute against the runbook."""
        return store_uri_under(self.base_dir, uri)


GROUP_WINDOW_SHARE = 4  # the grouping window is at most a quarter of the runbook's RTO


def _fleet_grouping(fleet: Fleet, rto: timedelta) -> None:
    if not fleet.lock_store:
        raise ValueError(
            "fleet.lock_store: group_window is set, so name the store the region's runbooks group in"
        )
    if fleet.group_window > rto / GROUP_WINDOW_SHARE:
        raise ValueError(
            f"fleet.group_window: {format_duration(fleet.group_window)} is not well inside the runbook's RTO "
            f"{format_duration(rto)} (at most a quarter: {format_duration(rto / GROUP_WINDOW_SHARE)})"
        )


def store_uri_under(base_dir: Path, uri: str) -> str:
    """`uri` with a relative `file://` path made absolute against `base_dir` (a runbook's
    folder): what `Runbook.store_uri` does, for code given the folder rather than the runbook."""
    if uri.startswith("file://") and not uri.startswith("file:///"):
        return "file://" + str((base_dir / uri[len("file://") :]).resolve())
    return uri
