"""Where this test session's own services listen. Each pytest-xdist worker (``make test`` runs two) gets its own
pair, 10 ports apart, so two workers, or two test sessions given other bases, run side by side on one machine."""

import os

#: 0 for the first xdist worker (and for a run without xdist), 1 for the second, ...
WORKER = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


def _shifted(address: str) -> str:
    host, _, port = address.rpartition(":")
    return f"{host}:{int(port) + 10 * WORKER}"


#: the session's Kafka broker (the fault test starts and kills a broker of its own on another port)
TEST_BROKER = _shifted(os.environ.get("SENSORCEP_TEST_BROKER", "127.0.0.1:19092"))
#: the Spark Connect server the session's SparkSession serves (tests/e2e/test_connect.py)
CONNECT_PORT = int(_shifted(f"x:{os.environ.get('SENSORCEP_TEST_CONNECT_PORT', '19002')}").rpartition(":")[2])
