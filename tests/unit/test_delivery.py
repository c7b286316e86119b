"""Delivery of one message (issue "Incidents reach people"): each receiver's own format, signed webhooks, retries
with the same notification id, and a dead letter instead of an exception, against a real HTTP server on loopback;
e-mail against a real SMTP server on loopback (STARTTLS, a login, the server's certificate checked)."""

from __future__ import annotations

import json
import socket
import ssl

import pytest
import trustme
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import AuthResult
from support.receiver import LoopbackReceiver

from sensorcep.routes import delivery
from sensorcep.routes.model import Receiver

SECRETS = {"hook-hmac": "s3cret", "pd-key": "R0UTING", "smtp": "smtp.example:587:ops:pw"}


@pytest.fixture
def server():
    with LoopbackReceiver() as receiver:
        yield receiver


MESSAGE = delivery.Message(
    notification_id="n1",
    receiver="team",
    transition="escalated",
    title="too_hot at plant: 2 incident(s)",
    incidents=[{"incident_id": "i1", "device_id": "d1"}, {"incident_id": "i2", "device_id": "d2"}],
    severity="critical",
    link="http://incidents.local/i1",
)


def test_a_webhook_is_json_signed_with_the_named_secret_and_keyed_by_the_notification_id(server):
    receiver = Receiver(name="team", webhook={"url": f"{server.url}/hook", "hmac_secret": "hook-hmac"})
    outcome = delivery.deliver(receiver, MESSAGE, SECRETS.__getitem__)
    assert (outcome.status, outcome.attempts) == ("delivered", ["200"])
    ((path, headers, body),) = server.received
    assert path == "/hook" and headers["Idempotency-Key"] == "n1"
    assert headers[delivery.SIGNATURE_HEADER] == delivery.signature("s3cret", body)
    assert json.loads(body)["incidents"][1]["device_id"] == "d2"


def test_slack_and_pagerduty_get_their_own_formats(server):
    slack = Receiver(name="chat", slack={"webhook_secret": "slack-url"})
    delivery.deliver(slack, MESSAGE, {"slack-url": f"{server.url}/slack"}.__getitem__)
    pagerduty = Receiver(name="oncall", pagerduty={"routing_key_secret": "pd-key", "url": f"{server.url}/pd"})
    delivery.deliver(pagerduty, MESSAGE, SECRETS.__getitem__)
    (_, _, text), (_, _, event) = server.received
    assert json.loads(text)["text"].splitlines() == [MESSAGE.title, "  device_id=d1", "  device_id=d2", MESSAGE.link]
    event = json.loads(event)
    assert (event["routing_key"], event["dedup_key"], event["event_action"]) == ("R0UTING", "n1", "trigger")
    assert event["payload"]["severity"] == "critical" and event["links"][0]["href"] == MESSAGE.link


def test_a_failing_receiver_is_retried_with_the_same_id_then_dead_lettered_and_nothing_raises(server):
    receiver = Receiver(name="team", webhook={"url": f"{server.url}/hook", "hmac_secret": "hook-hmac"})
    server.codes = [500, 503]
    waits = []
    outcome = delivery.deliver(receiver, MESSAGE, SECRETS.__getitem__, attempts=3, backoff_s=0.5, wait=waits.append)
    assert (outcome.status, outcome.attempts, waits) == ("delivered", ["500", "503", "200"], [0.5, 1.0])
    assert {headers["Idempotency-Key"] for _, headers, _ in server.received} == {"n1"}, "one id across retries"

    server.received, server.codes = [], [500, 500, 500]
    dead = delivery.deliver(receiver, MESSAGE, SECRETS.__getitem__, attempts=3, backoff_s=0, wait=waits.append)
    assert (dead.status, dead.attempts) == ("dead_letter", ["500", "500", "500"])
    gone = Receiver(name="team", webhook={"url": "http://127.0.0.1:9/hook", "hmac_secret": "hook-hmac"})  # discard
    refused = delivery.deliver(gone, MESSAGE, SECRETS.__getitem__, attempts=2, backoff_s=0, wait=waits.append)
    assert refused.status == "dead_letter" and all("Error" in a for a in refused.attempts)


@pytest.mark.parametrize(
    "receiver, secrets, said",
    [
        (  # the secret scope lacks the name the routes give
            Receiver(name="chat", slack={"webhook_secret": "slack-url"}),
            {},
            "secret 'slack-url' could not be read (KeyError): nothing sent",
        ),
        (  # an empty value
            Receiver(name="team", webhook={"url": "http://127.0.0.1:9/hook", "hmac_secret": "hook-hmac"}),
            {"hook-hmac": ""},
            "secret 'hook-hmac' is empty: nothing sent",
        ),
        (  # a Slack URL pasted without its scheme: urllib's own message would quote it, and it is a secret
            Receiver(name="chat", slack={"webhook_secret": "slack-url"}),
            {"slack-url": "hooks.slack.example/T000/B000/the-secret-value"},
            "the address of receiver 'chat' is not an http(s) URL: nothing sent",
        ),
        (  # an SMTP secret of the wrong shape
            Receiver(name="mail", email={"to": ["ops@example.com"], "smtp_secret": "smtp"}),
            {"smtp": "smtp.example:ops:the-secret-value"},
            "secret 'smtp' is not host:port:user:password: nothing sent",
        ),
    ],
    ids=["missing", "empty", "not-a-url", "smtp-shape"],
)
def test_a_secret_a_receiver_cannot_use_dead_letters_its_message_at_once_saying_which_and_not_its_value(
    receiver, secrets, said
):
    waits = []
    outcome = delivery.deliver(receiver, MESSAGE, secrets.__getitem__, attempts=3, backoff_s=1, wait=waits.append)
    assert (outcome.status, outcome.attempts, waits) == ("dead_letter", [said], []), "no retry: a retry cannot help"
    assert "the-secret-value" not in str(outcome)


def test_a_line_break_in_a_label_leaves_the_subject_one_line_and_one_in_an_address_dead_letters_the_message():
    broken = delivery.Message(**{**MESSAGE.__dict__, "title": "too_hot at device_id=d1\r\nBcc: all@example.com"})
    mail = delivery.render(Receiver(name="mail", email={"to": ["ops@example.com"], "smtp_secret": "smtp"}), broken,
                           SECRETS.__getitem__)  # fmt: skip
    assert mail["Subject"] == "too_hot at device_id=d1 Bcc: all@example.com" and mail["Bcc"] is None
    odd = Receiver(name="mail", email={"to": ["ops@example.com\nBcc: all@example.com"], "smtp_secret": "smtp"})
    outcome = delivery.deliver(odd, MESSAGE, SECRETS.__getitem__, attempts=3, backoff_s=0)
    assert outcome.status == "dead_letter" and outcome.attempts[0].startswith("receiver 'mail' cannot take this")


def test_an_email_names_its_notification_and_lists_the_incidents():
    receiver = Receiver(name="mail", email={"to": ["ops@example.com"], "smtp_secret": "smtp"})
    mail = delivery.render(receiver, MESSAGE, SECRETS.__getitem__)
    assert (mail["Subject"], mail["To"], mail["Message-ID"]) == (MESSAGE.title, "ops@example.com", "<n1@sensor-cep>")
    assert "device_id=d2" in mail.get_content()


@pytest.fixture
def smtp_server(tmp_path, monkeypatch):
    """A real SMTP server on loopback (aiosmtpd) that takes mail only after STARTTLS and a login, with a certificate
    for 127.0.0.1 from a test CA (trustme) that the client trusts through ``SSL_CERT_FILE`` (OpenSSL's own variable:
    the delivery code checks certificates as it does against a real server). Yields (the mails, the port)."""
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    monkeypatch.setenv("SSL_CERT_FILE", str(tmp_path / "ca.pem"))
    served = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert("127.0.0.1").configure_cert(served)
    mails = []

    class Handler:
        async def handle_DATA(self, server, session, envelope):  # noqa: N802 - aiosmtpd's name
            mails.append((session.authenticated, envelope.rcpt_tos, envelope.content))
            return "250 OK"

    def login(server, session, envelope, mechanism, data):
        return AuthResult(success=(data.login, data.password) == (b"ops", b"pw"), handled=False)

    with socket.socket() as probe:  # a free port (aiosmtpd's controller takes a number, not 0)
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(
        Handler(), hostname="127.0.0.1", port=port, tls_context=served, require_starttls=True, authenticator=login
    )
    controller.start()
    try:
        yield mails, port
    finally:
        controller.stop()


def test_an_email_is_sent_over_starttls_after_a_login_and_refused_by_a_server_it_cannot_trust(smtp_server, monkeypatch):
    mails, port = smtp_server
    receiver = Receiver(name="mail", email={"to": ["ops@example.com"], "smtp_secret": "smtp"})
    secrets = {"smtp": f"127.0.0.1:{port}:ops:pw"}.__getitem__
    outcome = delivery.deliver(receiver, MESSAGE, secrets, attempts=1)
    assert (outcome.status, outcome.attempts) == ("delivered", ["250"])
    ((authenticated, recipients, content),) = mails
    assert authenticated and recipients == ["ops@example.com"]
    assert b"Message-ID: <n1@sensor-cep>" in content and b"device_id=d2" in content

    wrong = {"smtp": f"127.0.0.1:{port}:ops:wrong"}.__getitem__
    refused = delivery.deliver(receiver, MESSAGE, wrong, attempts=1)
    assert refused.status == "dead_letter" and "Authentication" in refused.attempts[0]
    monkeypatch.delenv("SSL_CERT_FILE")  # the server's certificate is from a CA the client does not know now
    untrusted = delivery.deliver(receiver, MESSAGE, secrets, attempts=1)
    assert untrusted.status == "dead_letter" and "CERTIFICATE_VERIFY_FAILED" in untrusted.attempts[0]
    assert len(mails) == 1, "no mail without the right login or with a server the client cannot trust"
