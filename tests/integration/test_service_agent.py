"""Each memwal service names itself in the User-Agent of its requests, memwal's own and Lance's.

An operator reads what each service costs from the store's access log (S3
server access logs, CloudTrail); bench/bill.py reads it from its proxy. A
User-Agent the user set is theirs and is kept.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from memwal_core.demo import write_demo_table
from memwal_core.model.table import MemWalTable
from memwal_core.storage.options import StorageOptions
from tests.support.cli import option_flags, run_cli
from tests.support.proxy import LatencyProxy, user_agent


class AgentProxy(LatencyProxy):
    """Counts each request's User-Agent."""

    def __init__(self, upstream_port: int) -> None:
        self.agents: Counter[str] = Counter()
        super().__init__(upstream_port)

    def on_request_head(self, line: str, head: bytes) -> object:
        with self._lock:
            self.agents[user_agent(head)] += 1
        return self.on_request(line)


def _port(seaweed: Any) -> int:
    return int(seaweed.endpoint.rsplit(":", 1)[1])


def test_a_command_names_its_service_on_every_request_memwals_and_lances(seaweed: Any) -> None:
    uri = f"s3://memwal-test/agent-{uuid.uuid4().hex}"
    write_demo_table(
        uri, seaweed.storage_options(), base_rows=100, regions=2, rounds=2, rows_per_generation=20
    )
    with AgentProxy(_port(seaweed)) as proxy:
        options = proxy.storage_options(seaweed.storage_options())
        done = run_cli("merge", uri, *option_flags(options), "--engine", "local", "--json")
    assert done.returncode == 0, done.stderr
    agents = dict(proxy.agents)
    # memwal's client sends the name as it is; Lance appends its own (the merge's commit is Lance's).
    assert agents.get("memwal/merge", 0) > 0, agents
    assert any(a.startswith("memwal/merge ") and "pylance" in a for a in agents), agents
    assert all(a.startswith("memwal/merge") for a in agents), agents


def test_a_user_agent_the_user_set_is_kept(seaweed: Any) -> None:
    uri = f"s3://memwal-test/agent-own-{uuid.uuid4().hex}"
    write_demo_table(
        uri, seaweed.storage_options(), base_rows=100, regions=2, rounds=2, rows_per_generation=20
    )
    with AgentProxy(_port(seaweed)) as proxy:
        options = StorageOptions({**proxy.storage_options(seaweed.storage_options()), "user_agent": "etl/7"})
        with MemWalTable.open(uri, options.for_service("status")) as table:
            table.read_regions()
            table.dataset()
    assert set(proxy.agents) <= {"etl/7", "etl/7 pylance/14.0.2"}, proxy.agents
    assert proxy.agents["etl/7"] > 0
