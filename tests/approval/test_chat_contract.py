"""The Chat contract (tests/contracts/chat.py) on Slack (slack-sdk against the local Web API
stub) and the console."""

import io
import json

import pytest
from pydantic import SecretStr

from lifeboat_dr.providers.chat.console import ConsoleChat
from lifeboat_dr.providers.chat.slack import SlackChat
from tests.contracts.chat import ChatContract


class TestSlackChat(ChatContract):
    @pytest.fixture
    def chat(self, slack_stub):
        return SlackChat(SecretStr("xoxb-test"), base_url=slack_stub.base_url)

    @pytest.fixture
    def shown(self, slack_stub):
        return lambda: json.dumps(slack_stub.calls)


class TestConsoleChat(ChatContract):
    @pytest.fixture
    def out(self):
        return io.StringIO()

    @pytest.fixture
    def chat(self, out):
        return ConsoleChat("wait", out=out)

    @pytest.fixture
    def shown(self, out):
        return out.getvalue
