"""One message to one receiver, in the receiver's own format, sent with retries, and what came of it.

:func:`render` turns a :class:`Message` (a group of incidents from :mod:`sensorcep.routes.planning`) into the request a
receiver expects: a signed JSON webhook, Slack's incoming-webhook text, a PagerDuty Events API v2 event (``dedup_key``
= the notification id), or an e-mail. :func:`deliver` sends it, retries a failure with backoff, and after the last
attempt gives a dead letter instead of raising: a receiver that is down never stops the job. Every attempt carries the
same notification id (``Idempotency-Key``), so a receiver can drop a repeat.

Secrets are looked up by name through ``secret(name)`` at send time (:func:`scope_secrets`: the secret scope on
Databricks, environment variables locally), never held in the routes. Only the standard library is used (``urllib``,
``hmac``, ``smtplib``): nothing the Databricks Runtime lacks, nothing to pin.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import smtplib
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage

from sensorcep.routes.model import Receiver
from sensorcep.runtime import get_dbutils

#: PagerDuty's Events API v2 endpoint (a receiver may name another: a proxy, or a test's local server)
PAGERDUTY_URL = "https://events.pagerduty.com/v2/enqueue"
#: the header a webhook's HMAC-SHA256 signature of the body travels in
SIGNATURE_HEADER = "X-Sensorcep-Signature"
PAGERDUTY_SEVERITY = {"critical": "critical", "warning": "warning", "info": "info"}


@dataclass(frozen=True)
class Message:
    notification_id: str
    receiver: str
    transition: str  # opened, escalated, ... (the lifecycle's)
    title: str
    incidents: list[dict]  # each incident's id and labels
    severity: str = "warning"
    link: str | None = None  # the incident page


@dataclass(frozen=True)
class Request:
    url: str
    headers: dict[str, str]
    body: bytes


@dataclass
class Outcome:
    """What came of a message: ``delivered`` or ``dead_letter``, and every attempt's result (HTTP status or error)."""

    notification_id: str
    status: str
    attempts: list[str] = field(default_factory=list)


def _json(payload: dict) -> bytes:
    return json.dumps(payload, sort_keys=True, default=str).encode()


def signature(secret: str, body: bytes) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


def render(receiver: Receiver, message: Message, secret: Callable[[str], str]) -> Request | EmailMessage:
    """The request (or e-mail) ``receiver`` expects for ``message``."""
    headers = {"Content-Type": "application/json", "Idempotency-Key": message.notification_id}
    lines = [message.title] + [
        "  " + ", ".join(f"{k}={v}" for k, v in sorted(i.items()) if k != "incident_id") for i in message.incidents
    ]
    if message.link:
        lines.append(message.link)
    if receiver.webhook is not None:
        body = _json({**message.__dict__})
        headers[SIGNATURE_HEADER] = signature(secret(receiver.webhook.hmac_secret), body)
        return Request(receiver.webhook.url, headers, body)
    if receiver.slack is not None:
        return Request(secret(receiver.slack.webhook_secret), headers, _json({"text": "\n".join(lines)}))
    if receiver.pagerduty is not None:
        event = {
            "routing_key": secret(receiver.pagerduty.routing_key_secret),
            "event_action": "trigger",
            "dedup_key": message.notification_id,
            "payload": {
                "summary": message.title[:1024],
                "source": "sensor-cep",
                "severity": PAGERDUTY_SEVERITY.get(message.severity, "warning"),
                "custom_details": {"incidents": message.incidents, "transition": message.transition},
            },
            **({"links": [{"href": message.link, "text": "the incident"}]} if message.link else {}),
        }
        return Request(receiver.pagerduty.url or PAGERDUTY_URL, headers, _json(event))
    mail = EmailMessage()
    mail["Subject"] = message.title
    mail["To"] = ", ".join(receiver.email.to)
    mail["From"] = "sensor-cep"
    mail["Message-ID"] = f"<{message.notification_id}@sensor-cep>"
    mail.set_content("\n".join(lines))
    return mail


def _send_once(request: Request | EmailMessage, receiver: Receiver, secret, timeout_s: float) -> str:
    if isinstance(request, EmailMessage):
        host, port, user, password = secret(receiver.email.smtp_secret).split(":", 3)
        with smtplib.SMTP(host, int(port), timeout=timeout_s) as smtp:
            # the server's certificate checked against the system's CAs and the host named (smtplib's own default
            # checks neither: the password would go to whoever answers)
            smtp.starttls(context=ssl.create_default_context())
            smtp.login(user, password)
            smtp.send_message(request)
        return "250"
    sent = urllib.request.Request(request.url, data=request.body, headers=request.headers, method="POST")
    with urllib.request.urlopen(sent, timeout=timeout_s) as response:  # noqa: S310 - http(s) URLs of the routes
        return str(response.status)


def deliver(
    receiver: Receiver,
    message: Message,
    secret: Callable[[str], str],
    *,
    attempts: int = 3,
    backoff_s: float = 1.0,
    timeout_s: float = 10.0,
    wait: Callable[[float], None] = time.sleep,
) -> Outcome:
    """Send ``message`` to ``receiver``: up to ``attempts`` tries, ``backoff_s`` doubling between them; a 2xx answer
    is delivered, anything else (an HTTP error, a timeout, a refused connection) is tried again, then dead-lettered."""
    request = render(receiver, message, secret)
    outcome = Outcome(message.notification_id, "dead_letter")
    for attempt in range(attempts):
        if attempt:
            wait(backoff_s * 2 ** (attempt - 1))
        try:
            outcome.attempts.append(_send_once(request, receiver, secret, timeout_s))
            outcome.status = "delivered"
            return outcome
        except urllib.error.HTTPError as error:
            outcome.attempts.append(str(error.code))
        except (OSError, smtplib.SMTPException) as error:  # refused, timed out, unreachable
            outcome.attempts.append(f"{type(error).__name__}: {error}"[:200])
    return outcome


def scope_secrets(scope: str) -> Callable[[str], str]:
    """``secret(name)`` from the secret scope (locally: the environment variable ``<SCOPE>_<NAME>``, upper-cased,
    ``-`` as ``_``, as :class:`sensorcep.runtime` 's local dbutils reads it)."""
    return lambda name: get_dbutils().secrets.get(scope, name)
