"""A stand-in for the ladder's MLflow history reader (``ladder_verdicts._Histories``) in tests that
judge synthetic rows: run id -> RunHistory, from a table the test fills."""


class FakeHistories:
    table: dict = {}

    def __init__(self, state):
        pass

    def __call__(self, run_id, windows=()):
        return self.table[run_id]
