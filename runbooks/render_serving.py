"""The realtime-serving steps of a rendered runbook: verify the standby, switch, watch, revert.

Called by `lifeboat_dr.runbooks.render` for runbooks with a `serving` section, in place of the training
steps (fence, provision, resume, loss parity): the standby already runs. Every automated step
comes with what to run by hand through the same router.
"""

from __future__ import annotations

from lifeboat_dr.kernel.durations import format_duration as fd
from lifeboat_dr.runbooks.model import Runbook


def _set_weights(rb: Runbook, weights: dict[str, int]) -> str:
    t = rb.serving.traffic
    if t.router.value == "haproxy":
        line = "; ".join(f"set server {t.backend}/{srv} weight {w}" for srv, w in weights.items())
        return f'`echo "{line}" | socat stdio {t.socket}`'
    return (
        f"`aws route53 change-resource-record-sets --hosted-zone-id {t.zone_id} --change-batch file://switch.json` "
        f"(one UPSERT per record of `{t.record}`, each with its SetIdentifier, values and TTL unchanged and the new Weight: "
        + ", ".join(f"{srv}={w}" for srv, w in weights.items())
        + ")"
    )


def _show(rb: Runbook) -> str:
    t = rb.serving.traffic
    if t.router.value == "haproxy":
        return f'`echo "show servers state {t.backend}" | socat stdio {t.socket}`'
    return f"`aws route53 list-resource-record-sets --hosted-zone-id {t.zone_id} --query \"ResourceRecordSets[?Name=='{t.record}.']\"`"


def serving_steps(rb: Runbook, source: str) -> list[str]:
    s, t = rb.serving, rb.serving.traffic
    weights = s.weights or f"the newest certified checkpoint of `{rb.secondary.store}`"
    steps = ", then ".join(f"{p}%" for p in s.switch.steps)
    hold = f", each step but the last watched for {fd(s.switch.hold)}" if len(s.switch.steps) > 1 else ""
    w = s.watch
    dns = (
        f"\nClients see a DNS change only once their resolvers' cached answer expires: keep `{t.record}`'s TTL short.\n"
        if t.router.value == "route53"
        else ""
    )
    return [
        f"""
## 2. Verify the standby

Automated: certify the weights (`lifeboat certify {source}`): the standby must serve {weights}.
Then the standby `{s.standby_url}` must report the same weights digest at `{s.model_path}`
(sha256 over each weight file's path, size and CRC32C), answer `{s.health_path}`, and answer a
canary `POST {s.canary.path}` within {fd(s.canary.latency_budget)}. Any of these failing: traffic stays where it is.

By hand:
1. `curl -s {s.standby_url}{s.model_path}` and compare the digest with the certified weights'.
2. `curl -s -o /dev/null -w '%{{http_code}} %{{time_total}}' {s.standby_url}{s.health_path}`
3. `curl -s -w ' %{{time_total}}' -H 'Content-Type: application/json' -d '<canary body>' {s.standby_url}{s.canary.path}`
""",
        f"""
## 3. Approve

{"Approvers: " + ", ".join(rb.approval.approvers) + f" within {fd(rb.approval.timeout)}." if rb.approval.required else "No approval is required: traffic moves once the standby is verified."}
""",
        f"""
## 4. Switch traffic

Automated: the {t.router.value} router sends {steps} of the traffic to `{t.secondary}`{hold}.
The serving RTO ends when all traffic is on the standby.
{dns}
By hand: see the weights with {_show(rb)}; move all traffic with
{_set_weights(rb, {t.secondary: 255, t.primary: 0})}.
""",
        f"""
## 5. Watch, and revert

For {fd(w.duration)} after the switch, one request every {fd(w.interval)} to the standby; over a
window of {w.window} requests, an error rate above {w.max_error_rate:.1%} or a P99 above
{fd(w.max_p99)} puts the weights back as they were before the switch (and says why).

By hand, to revert: {_set_weights(rb, {t.secondary: 0, t.primary: 255})}.
""",
        f"""
## 6. Record

Every phase's time goes to the ledger (kind `serving`), with the error window a synthetic client
saw in drills (first failed request to the first good one after the switch), judged against the
RTO. `lifeboat report {source}` shows the history and draws the timeline.
""",
    ]
