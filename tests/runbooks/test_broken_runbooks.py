"""A table of broken runbooks, each with the exact line an on-call would read."""

import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from lifeboat_dr.kernel.durations import format_duration, parse_duration
from lifeboat_dr.runbooks.loader import RunbookInvalid, load_runbook
from lifeboat_dr.shell.cli import main

GOOD = textwrap.dedent(
    """\
    name: job-a
    workload: pretraining
    primary:
      infra: aws/us-east-1
      store: s3://prim/ckpt
    secondary:
      infra: gcp/us-central1
      store: gs://dr/ckpt
      candidates:
        - infra: gcp/us-central1
          accelerators: H100:8
    job:
      task: task.yaml
    checkpoint:
      cadence: 30m
    approval:
      required: true
      approvers: [U1]
    """
)


def write(tmp_path, text, name="rb.yaml"):
    (tmp_path / "task.yaml").write_text("run: echo\n")
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path):
    with pytest.raises(RunbookInvalid) as e:
        load_runbook(path)
    return [str(p).removeprefix(f"{path}:") for p in e.value.problems]


BROKEN = [
    (
        "unknown key",
        ("  task: task.yaml\n", "  task: task.yaml\n  comand: x\n"),
        ["14: job.comand: unknown key 'comand'; did you mean 'command'?"],
    ),
    (
        "bad duration",
        ("cadence: 30m", "cadence: 30 minutes"),
        ["15: checkpoint.cadence: '30 minutes' is not a duration; write it like 90s, 15m, 2h or 1h30m"],
    ),
    (
        "unknown workload",
        ("workload: pretraining", "workload: training"),
        [
            "2: workload: Input should be 'pretraining', 'finetuning', 'batch-inference' or 'realtime-inference'"
        ],
    ),
    (
        "same store twice",
        ("gs://dr/ckpt", "s3://prim/ckpt"),
        ["8: secondary.store: same as primary.store; a replica must live elsewhere"],
    ),
    (
        "approval without approvers",
        ("approvers: [U1]", "approvers: []"),
        ["18: approval.approvers: approval is required but no approvers are listed"],
    ),
    (
        "empty candidates",
        ("  candidates:\n    - infra: gcp/us-central1\n      accelerators: H100:8\n", "  candidates: []\n"),
        ["9: secondary.candidates: the candidate list is empty: name at least one infra to fail over to"],
    ),
    (
        "missing task file",
        ("task: task.yaml", "task: missing.yaml"),
        ["13: job.task: missing.yaml does not exist (relative to {path})"],
    ),
    (
        "not a store URI",
        ("store: s3://prim/ckpt", "store: hdfs://prim/ckpt"),
        [
            "5: primary.store: 'hdfs://prim/ckpt' is not a store URI; use s3://bucket/prefix, gs://bucket/prefix or file:///path"
        ],
    ),
    (
        "endpoint on GCS",
        ("  store: gs://dr/ckpt\n", "  store: gs://dr/ckpt\n  endpoint_url: http://minio:9000\n"),
        ["9: secondary.endpoint_url: applies to s3:// stores only"],
    ),
    (
        "unreachable quorum",
        ("checkpoint:", "detection:\n  signals: [provider]\n  quorum: 2\ncheckpoint:"),
        ["16: detection.quorum: 2 can never be reached with 1 signal(s)"],
    ),
    (
        "escalate with nobody",
        ("approvers: [U1]", "approvers: [U1]\n  on_timeout: escalate"),
        ["16: approval.escalation: on_timeout is escalate but no escalation approvers are given"],
    ),
    (
        "resume arg without placeholder",
        ("task: task.yaml", "task: task.yaml\n  resume:\n    arg: --resume"),
        ["15: job.resume.arg: must contain {{checkpoint}}"],
    ),
    (
        "missing cadence",
        ("  cadence: 30m\n", "  layout: dcp\n"),
        ["14: checkpoint.cadence: required, but missing"],
    ),
    (
        "unknown layout",
        ("  cadence: 30m\n", "  cadence: 30m\n  layout: orbax\n"),
        [
            "16: checkpoint.layout: Input should be 'auto', 'dcp', 'deepspeed', 'megatron', 'hf', "
            "'hf-weights' or 'manifest'"
        ],
    ),
    (
        "loss parity with nothing to compare",
        ("checkpoint:", "verify:\n  parity_steps: 20\ncheckpoint:"),
        [
            "14: verify.loss_log: parity_steps is 20 but no pre-failure loss log is named, so parity "
            "could never be checked; name one (e.g. a loss.jsonl in the primary store) or set parity_steps: 0"
        ],
    ),
    (
        "bucket replication across services",
        ("workload: pretraining\n", "workload: pretraining\nreplication: s3-crr\n"),
        ["3: replication: s3-crr replicates S3 to S3, but secondary.store is 'gs://dr/ckpt'"],
    ),
    (
        "one dual-region bucket on S3",
        ("workload: pretraining\n", "workload: pretraining\nreplication: gcs-dual-region\n"),
        ["6: primary.store: replication: gcs-dual-region needs a gs:// store, not 's3://prim/ckpt'"],
    ),
    (
        "one dual-region bucket, two stores",
        ("store: s3://prim/ckpt", "store: gs://dr/other\nreplication: gcs-dual-region"),
        [
            "9: secondary.store: replication: gcs-dual-region reads the checkpoints where the primary "
            "wrote them, so it must be primary.store 'gs://dr/other', not 'gs://dr/ckpt' (a second lease "
            "there would not be the one the writers commit against)"
        ],
    ),
    (
        "duplicate key",
        ("workload: pretraining\n", "workload: pretraining\nworkload: finetuning\n"),
        ["3: workload: duplicate key"],
    ),
]


@pytest.mark.parametrize("case, edit, expected", BROKEN, ids=[b[0] for b in BROKEN])
def test_broken_runbook_names_line_field_and_reason(tmp_path, case, edit, expected):
    old, new = edit
    assert old in GOOD
    path = write(tmp_path, GOOD.replace(old, new, 1))
    assert problems(path) == [e.format(path=path) for e in expected]


def test_good_runbook_loads_with_workload_defaults(tmp_path):
    rb = load_runbook(write(tmp_path, GOOD))
    assert (rb.rpo_target, rb.rto_target) == (timedelta(hours=2), timedelta(minutes=30))


def test_a_runbook_whose_bucket_replicates_says_so_and_the_default_is_lifeboat(tmp_path):
    assert load_runbook(write(tmp_path, GOOD)).replication == "lifeboat"
    both_s3 = GOOD.replace("gs://dr/ckpt", "s3://dr/ckpt").replace(
        "workload:", "replication: s3-crr\nworkload:"
    )
    rb = load_runbook(write(tmp_path, both_s3))
    assert rb.replication == "s3-crr"
    from lifeboat_dr.flows.wiring import swapped

    assert swapped(rb).replication == "lifeboat"  # the rule is one way: a failback's copy back is ours


DUAL = GOOD.replace("s3://prim/ckpt", "gs://dr/ckpt").replace(
    "workload:", "replication: gcs-dual-region\nworkload:"
)


def test_one_dual_region_bucket_is_both_sites_store_and_stays_so_for_a_failback(tmp_path):
    rb = load_runbook(write(tmp_path, DUAL))
    assert rb.replication == "gcs-dual-region" and rb.primary.store == rb.secondary.store == "gs://dr/ckpt"
    from lifeboat_dr.flows.wiring import swapped

    assert swapped(rb).replication == "gcs-dual-region"  # the bucket replicates both ways


def test_a_witness_in_the_dual_region_bucket_is_refused_and_one_elsewhere_is_not(tmp_path):
    inside = write(tmp_path, DUAL + "witness:\n  store: gs://dr/witness\n")
    assert problems(inside) == [
        "21: witness.store: 'gs://dr/witness' is in the sites' dual-region bucket gs://dr: a witness must "
        "live in a third place, not cast a second vote for that bucket"
    ]
    elsewhere = write(tmp_path, DUAL + "witness:\n  store: s3://third/witness\n")
    assert load_runbook(elsewhere).witness.store == "s3://third/witness"


def test_targets_override_the_workload_defaults(tmp_path):
    rb = load_runbook(write(tmp_path, GOOD + "targets:\n  rto: 90s\n"))
    assert (rb.rpo_target, rb.rto_target) == (timedelta(hours=2), timedelta(seconds=90))


def test_validate_prints_one_line_per_problem_and_exits_1(tmp_path, capsys):
    text = GOOD.replace("  task: task.yaml\n", "  task: task.yaml\n  comand: x\n").replace("30m", "soon")
    path = write(tmp_path, text)
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"{path}:14: job.comand: unknown key 'comand'; did you mean 'command'?",
        f"{path}:16: checkpoint.cadence: 'soon' is not a duration; write it like 90s, 15m, 2h or 1h30m",
    ]


def test_yaml_syntax_error_gives_line_and_column(tmp_path, capsys):
    path = write(tmp_path, "name: a\n  workload: [\n")
    assert main(["validate", str(path)]) == 1
    assert (
        capsys.readouterr().err.strip()
        == f"{path}:2: YAML syntax error at column 11: mapping values are not allowed here"
    )


def test_missing_file_says_so(tmp_path, capsys):
    assert main(["validate", str(tmp_path / "nope.yaml")]) == 1
    assert capsys.readouterr().err.strip() == f"{tmp_path / 'nope.yaml'}: no such file"


def test_one_bad_file_fails_the_batch_but_every_file_is_checked(tmp_path, capsys):
    good = write(tmp_path, GOOD, "good.yaml")
    bad = write(tmp_path, "name: x\n", "bad.yaml")
    assert main(["validate", str(bad), str(good)]) == 1
    out = capsys.readouterr()
    assert f"{good}: ok (job-a" in out.out
    assert f"{bad}:1: workload: required, but missing" in out.err


@pytest.mark.parametrize(
    "text, seconds",
    [
        ("90s", 90),
        ("15m", 900),
        ("2h", 7200),
        ("1h30m", 5400),
        ("0", 0),
        ("250ms", 0.25),
        (45, 45),
        ("1d", 86400),
    ],
)
def test_durations_read_as_people_write_them(text, seconds):
    assert parse_duration(text).total_seconds() == seconds


@pytest.mark.parametrize("text", ["", "2 hours", "h", "10x", "-5m", "1h 30m"])
def test_nonsense_durations_are_refused(text):
    with pytest.raises(ValueError):
        parse_duration(text)


@pytest.mark.parametrize(
    "seconds, text", [(90, "1m30s"), (7200, "2h"), (0.25, "250ms"), (0, "0s"), (5400, "1h30m")]
)
def test_durations_print_back_shortest(seconds, text):
    assert format_duration(timedelta(seconds=seconds)) == text


def _alias_bomb() -> str:
    """Billion laughs: nine levels of nine aliases each, 9^9 strings once expanded."""
    text = 'a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]\n'
    for prev, name in zip("abcdefgh", "bcdefghi", strict=True):
        text += f"{name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
    return text


# (case, the file's bytes, the one line `validate` prints after "{path}:")
HOSTILE = [
    (
        "control character in the file",
        GOOD.replace("name: job-a", "name: job-a\x07"),
        "1: control character U+0007 in the file; a runbook is plain text",
    ),
    (
        "terminal escape in a quoted string",
        GOOD + 'description: "\\e[31mred"\n',
        "19: description: control character U+001B in the text; write plain text",
    ),
    (
        ".inf duration",
        GOOD.replace("cadence: 30m", "cadence: .inf"),
        "15: checkpoint.cadence: inf is not a duration; write it like 90s, 15m, 2h or 1h30m",
    ),
    (
        "huge duration",
        GOOD.replace("cadence: 30m", "cadence: 99999999999d"),
        "15: checkpoint.cadence: '99999999999d' is too long for a duration (at most 365000d)",
    ),
    (
        "huge duration as a number of seconds",
        GOOD.replace("cadence: 30m", "cadence: 1.0e+300"),
        "15: checkpoint.cadence: '1e+300' is too long for a duration (at most 365000d)",
    ),
    (
        ".nan factor",
        GOOD.replace("cadence: 30m", "cadence: 30m\n  freshness_factor: .nan"),
        "16: checkpoint.freshness_factor: Input should be a finite number",
    ),
    (
        "a number where a URI belongs",
        GOOD.replace("store: s3://prim/ckpt", "store: 5"),
        "5: primary.store: 5 is not a store URI; write a string like s3://bucket/prefix",
    ),
    (
        "a list used as a key",
        GOOD + "[a, b]: 1\n",
        "19: a list cannot be a key; keys are plain words like `name`",
    ),
    (
        "a mapping used as a key",
        GOOD + "{a: 1}: 2\n",
        "19: a mapping cannot be a key; keys are plain words like `name`",
    ),
    (
        "a date used as a key",
        GOOD + "2026-01-01: x\n",
        "19: '2026-01-01' cannot be a key; keys are plain words like `name`",
    ),
    (
        "a 5,000-digit integer",
        GOOD + "detection:\n  quorum: " + "9" * 5000 + "\n",
        "20: detection.quorum: number has more than 18 digits",
    ),
    (
        "20,000-deep nesting",
        GOOD + "description: " + "[" * 20_000 + "]" * 20_000 + "\n",
        "19: more than 128 brackets open at once: nested too deeply",
    ),
    (
        "100-deep flow nesting",
        GOOD + "description: " + "[" * 100 + "]" * 100 + "\n",
        "19: nested more than 64 levels deep",
    ),
    (
        "20,000-deep block nesting",
        "".join(" " * i + "k:\n" for i in range(20_000))[: 200 * 1024],
        "64: nested more than 64 levels deep",
    ),
    (
        "YAML alias bomb",
        _alias_bomb(),
        "4: d: expands to more than 5,000 values (YAML aliases inside aliases?)",
    ),
    (
        "an alias that contains itself",
        GOOD + "description: &x [*x]\n",
        "19: description.0.0.0.0.0...: nested more than 64 levels deep (an alias that contains itself?)",
    ),
    (
        "too many values",
        "name: x\nlist:\n" + "  - a\n" * 20_000,
        "4998: more than 5,000 values; a runbook has a few hundred",
    ),
    (
        "a 50 MB file",
        GOOD + "#" + "x" * (50 << 20) + "\n",
        "file is larger than 262,144 bytes; a runbook is a few KB",
    ),
    (
        "not UTF-8",
        GOOD.encode() + b"description: caf\xe9\n",
        "19: not UTF-8 text (byte 329)",
    ),
    (
        "an impossible date",
        GOOD + "description: 2026-02-30\n",
        "19: description: '2026-02-30' cannot be read: day is out of range for month",
    ),
    (
        "a tag that cannot be built",
        GOOD.replace("cadence: 30m", "cadence: !!float abc"),
        "15: checkpoint.cadence: 'abc' cannot be read: could not convert string to float: 'abc'",
    ),
    (
        "a Python tag",
        GOOD + 'description: !!python/object/apply:os.system ["touch pwned"]\n',
        "19: description: Input should be a valid string",
    ),
    (
        "a task path too long for the OS",
        GOOD.replace("task: task.yaml", "task: " + "a" * 5000),
        "13: job.task: '" + "a" * 80 + "' cannot be a path: File name too long",
    ),
]


def test_anchors_and_aliases_a_person_writes_still_load(tmp_path):
    text = GOOD.replace("  candidates:\n    - infra", "  candidates:\n    - &gcp\n      infra").replace(
        "      accelerators: H100:8\n", "      accelerators: H100:8\n    - *gcp\n"
    )
    rb = load_runbook(write(tmp_path, text))
    assert [c.infra for c in rb.secondary.candidates] == ["gcp/us-central1", "gcp/us-central1"]


@pytest.mark.parametrize("case, content, expected", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_runbook_is_one_line_and_exit_1(tmp_path, capsys, case, content, expected):
    path = tmp_path / "rb.yaml"
    (tmp_path / "task.yaml").write_text("run: echo\n")
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
    assert main(["validate", str(path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"{path}:{expected}" if expected[0].isdigit() else f"{path}: {expected}"
    ]
    assert not (tmp_path / "pwned").exists()


def test_a_device_that_never_ends_is_refused_not_read_forever(capsys):
    assert main(["validate", "/dev/zero"]) == 1
    assert capsys.readouterr().err.strip() == "/dev/zero: not a regular file"


_VALIDATE_AND_REPORT_PEAK = """
import sys
from lifeboat_dr.shell.cli import main
code = main(["validate", *sys.argv[1:]])
peak = next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(peak)
sys.exit(code)
"""


@pytest.mark.processes
@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmHWM from Linux /proc")
def test_hostile_runbooks_stay_within_bounded_memory(tmp_path):
    """Every hostile file at once through the real CLI in a fresh process: exit 1, one line
    per file, and a peak RSS (VmHWM: this process only) that shows nothing was expanded
    or read whole."""
    import subprocess
    import sys

    (tmp_path / "task.yaml").write_text("run: echo\n")
    paths = []
    for i, (_, content, _) in enumerate(HOSTILE):
        paths.append(tmp_path / f"h{i}.yaml")
        paths[-1].write_bytes(content if isinstance(content, bytes) else content.encode())
    done = subprocess.run(
        [sys.executable, "-c", _VALIDATE_AND_REPORT_PEAK, *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=240,  # a hang guard, not a speed goal (that is benchmarks/hostile_runbooks.py)
    )
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.splitlines()) == len(HOSTILE)
    peak_kib = int(done.stdout.split()[-1])
    assert peak_kib < 200 * 1024, f"peak RSS {peak_kib} KiB"
