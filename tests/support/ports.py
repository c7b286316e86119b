"""Where this test session's own services listen; another pair lets two test sessions run side by side."""

import os

#: the session's Kafka broker (the fault test starts and kills a broker of its own on another port)
TEST_BROKER = os.environ.get("SENSORCEP_TEST_BROKER", "127.0.0.1:19092")
#: the Spark Connect server the session's SparkSession serves (tests/e2e/test_connect.py)
CONNECT_PORT = int(os.environ.get("SENSORCEP_TEST_CONNECT_PORT", "19002"))
