"""tests/conftest.py's guard: a log handler left on a test's closed capture stream writes to
sys.stderr instead of failing every later log line (and the test that happens to log next)."""

import io
import logging


def test_a_handler_left_on_a_closed_stream_writes_to_stderr_instead():
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    log = logging.getLogger("lifeboat.test.closed")
    log.addHandler(handler)
    stream.close()
    try:
        log.warning("still written")
    finally:
        log.removeHandler(handler)
    assert handler.stream is not stream
