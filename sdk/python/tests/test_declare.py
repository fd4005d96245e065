"""What @keel.workflow and @keel.step declare, as the host reads it (the
same manifest a Rust component gives), and the errors of declarations
that cannot be honoured, on CPython."""

import json
import unittest

import keel
from keel import _registry


class DeclarationsTest(unittest.TestCase):
    def test_the_manifest_carries_limits_schedules_and_durability(self):
        @keel.workflow(
            name="declared_orders",
            concurrency=keel.Concurrency("input.user_id", 2, on_limit="cancel_newest"),
            schedule=keel.Schedule(cron="0 2 * * *", tz="Europe/Berlin", overlap="buffer-one", input={"n": 1}),
            durability="relaxed",
        )
        async def orders(order: dict) -> int:
            """Takes an order.

            Charges it once."""
            return 0

        @keel.workflow(name="declared_hourly", schedule=keel.Schedule(every="1h", catchup_window="1d"))
        async def hourly() -> None:
            return None

        @keel.step(name="declared_call", rate_limit=keel.RateLimit("'api'", 60, "1m"),
                   concurrency=keel.Concurrency("'ledger'", 1))
        def call(n: int) -> int:
            return n

        manifest = json.loads(_registry.schemas())
        self.assertEqual(manifest["declared_orders"]["concurrency"],
                         {"key": "input.user_id", "limit": 2, "on_limit": "cancel_newest"})
        self.assertEqual(manifest["declared_orders"]["schedule"], {
            "cron": "0 2 * * *", "tz": "Europe/Berlin", "every_ms": None, "overlap": "buffer-one",
            "catchup_window_ms": None, "input": '{"n": 1}',
        })
        self.assertEqual(manifest["declared_orders"]["durability"], "relaxed")
        # The docstring, as an MCP client shows the workflow's tool.
        self.assertEqual(manifest["declared_orders"]["description"], "Takes an order.\n\nCharges it once.")
        self.assertIsNone(manifest["declared_hourly"]["description"])
        self.assertEqual(manifest["declared_hourly"]["schedule"]["every_ms"], 3_600_000)
        self.assertEqual(manifest["declared_hourly"]["schedule"]["catchup_window_ms"], 86_400_000)
        self.assertIsNone(manifest["declared_hourly"]["schedule"]["input"])
        self.assertIsNone(manifest["declared_hourly"]["durability"], "the worker's default")
        self.assertEqual(manifest["keel:steps"]["declared_call"], {
            "rate_limit": {"key": "'api'", "limit": 60, "per_ms": 60_000},
            "concurrency": {"key": "'ledger'", "limit": 1},
            "retry_budget_ms": None,
        })

    def test_a_declaration_that_cannot_be_honoured_says_what_to_write(self):
        cases = [
            (lambda: keel.Concurrency("input.k", 0), "limit=...\\) is a whole number of 1 or more"),
            (lambda: keel.Concurrency("input.k", 1, on_limit="drop"), "one of queue, cancel_newest"),
            (lambda: keel.RateLimit("'k'", 5, "soon"), "RateLimit\\(per=...\\) must be seconds"),
            (lambda: keel.Schedule(), "a cron spec or an every interval"),
            (lambda: keel.Schedule(cron="* * * * *", every="1h"), "a cron spec or an every interval"),
            (lambda: keel.Schedule(every="1h", tz="Europe/Berlin"), "give cron="),
            (lambda: keel.Schedule(every="1h", overlap="queue"), "one of skip, buffer-one, allow-all"),
            (lambda: keel.workflow(durability="eventual"), 'durability is "effect_gated" \\(the default\\), "strict" or "relaxed"'),
        ]
        for make, says in cases:
            with self.assertRaisesRegex(ValueError, says):
                make()

        with self.assertRaisesRegex(ValueError, "on_limit is for workflows"):
            @keel.step(name="declared_bad", concurrency=keel.Concurrency("'k'", 1, on_limit="cancel_newest"))
            def bad() -> None:
                return None


if __name__ == "__main__":
    unittest.main()
