"""One message to one receiver, in the receiver's own format, sent with retries, and what came of it.

:func:`render` turns a :class:`Message` (a group of incidents from :mod:`sensorcep.routes.planning`) into the request a
receiver expects: a signed JSON webhook, Slack's incoming-webhook text, a PagerDuty Events API v2 event (``dedup_key``
= the notification id), or an e-mail. :func:`deliver` sends it, retries a failure with backoff, and after the last
attempt gives a dead letter instead of raising: a receiver that is down, or a secret it lacks, never stops the job.
Every attempt carries the same notification id (``Idempotency-Key``), so a receiver can drop a repeat.

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


class UnusableSecret(Exception):
    """A receiver's secret that cannot be read from its scope, or is not what the receiver needs: its message is
    dead-lettered at once, with this, and the pass goes on. The text names the secret, never its value."""


def _checked(secret: Callable[[str], str]) -> Callable[[str], str]:
    """``secret``, raising :class:`UnusableSecret` for a secret it cannot read (missing from the scope, no access) or
    that is empty."""

    def read(name: str) -> str:
        try:
            value = secret(name)
        except Exception as error:  # dbutils' own error, or KeyError locally: the name is all that is said
            raise UnusableSecret(f"secret {name!r} could not be read ({type(error).__name__}): nothing sent") from None
        if not value:
            raise UnusableSecret(f"secret {name!r} is empty: nothing sent")
        return value

    return read


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
    mail["Subject"] = " ".join(message.title.split())  # a header holds no line break (a label's value may)
    mail["To"] = ", ".join(receiver.email.to)
    mail["From"] = "sensor-cep"
    mail["Message-ID"] = f"<{message.notification_id}@sensor-cep>"
    mail.set_content("\n".join(lines))
    return mail


def _send_once(request: Request | EmailMessage, receiver: Receiver, secret, timeout_s: float) -> str:
    if isinstance(request, EmailMessage):
        parts = secret(receiver.email.smtp_secret).split(":", 3)
        if len(parts) != 4 or not parts[1].isdigit():
            raise UnusableSecret(f"secret {receiver.email.smtp_secret!r} is not host:port:user:password: nothing sent")
        host, port, user, password = parts
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
    is delivered, anything else (an HTTP error, a timeout, a refused connection) is tried again, then dead-lettered.
    A message no try could send (a secret missing from its scope or of the wrong shape, a URL urllib cannot send to)
    is dead-lettered at once, saying why without the secret's value: one receiver's configuration never stops the
    pass, and every other receiver is still told."""
    secret = _checked(secret)
    outcome = Outcome(message.notification_id, "dead_letter")
    try:
        request = render(receiver, message, secret)
    except UnusableSecret as error:
        outcome.attempts.append(str(error))
        return outcome
    except ValueError as error:  # e.g. an e-mail address with a line break in the routes: not the message's secrets
        outcome.attempts.append(f"receiver {receiver.name!r} cannot take this message: {error}"[:200])
        return outcome
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
        except UnusableSecret as error:
            outcome.attempts.append(str(error))
            return outcome
        except ValueError:  # urllib's message quotes the URL, which may be a secret (a Slack webhook's)
            outcome.attempts.append(f"the address of receiver {receiver.name!r} is not an http(s) URL: nothing sent")
            return outcome
    return outcome


def scope_secrets(scope: str) -> Callable[[str], str]:
    """``secret(name)`` from the secret scope (locally: the environment variable ``<SCOPE>_<NAME>``, upper-cased,
    ``-`` as ``_``, as :class:`sensorcep.runtime` 's local dbutils reads it)."""
    return lambda name: get_dbutils().secrets.get(scope, name)
