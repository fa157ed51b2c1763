"""Rate limits (``engine.rate_limits``): fixed windows on the clock, 429 with the seconds to wait;
shared by the serving processes through a mapped file beside a SQLite database, through the
database on PostgreSQL (two limiters stand for two web processes, and a real second process for
the file's lock)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from sqlalchemy import create_engine, select

from app import create_app
from engine.errors import TooManyRequestsError
from engine.rate_limits import DatabaseWindows, FileWindows, Limit, MemoryWindows, RateLimits
from engine.store.db import db
from engine.store.models import RateLimitWindow
from tests.conftest import make_database_url
from tests.harness import drop_postgres_database

ROOT = Path(__file__).resolve().parents[3]


class Clock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def accepted(limit: Limit, bucket: str, tries: int) -> int:
    count = 0
    for _ in range(tries):
        try:
            limit.check(bucket)
            count += 1
        except TooManyRequestsError:
            pass
    return count


def test_a_window_allows_the_rate_then_refuses_with_the_seconds_to_its_end():
    clock = Clock(1000.25)
    limit = Limit("API key", "api_key", 3, MemoryWindows(), clock)
    assert accepted(limit, "k1", 3) == 3
    with pytest.raises(TooManyRequestsError) as refused:
        limit.check("k1")
    error = refused.value
    assert (error.http_status, error.reason, error.retry_after_s) == (429, "too_many_requests", 1)
    assert error.http_headers() == {"Retry-After": "1"}
    assert error.to_rpc()["data"] == {"reason": "too_many_requests", "retry_after_s": 1}
    assert "API key" in error.message
    assert accepted(limit, "k2", 3) == 3  # another key has its own allowance
    clock.now = 1001.0  # the next second: a new window
    assert accepted(limit, "k1", 5) == 3


def test_a_rate_below_one_is_one_request_per_so_many_seconds():
    clock = Clock(1000.0)
    limit = Limit("webhook", "webhook", 0.2, MemoryWindows(), clock)  # one per 5 s
    assert (limit.window_s, limit.allowed) == (5, 1)
    assert accepted(limit, "w", 3) == 1
    clock.now = 1003.5
    with pytest.raises(TooManyRequestsError) as refused:
        limit.check("w")
    assert refused.value.retry_after_s == 2  # the window ends at 1005: 1.5 s, rounded up
    clock.now = 1005.0
    assert accepted(limit, "w", 2) == 1


def test_fractions_above_one_round_down():
    assert Limit("x", "x", 2.7, MemoryWindows()).allowed == 2


@pytest.mark.parametrize("rate", [-1, float("nan"), float("inf")])
def test_a_rate_that_is_not_a_positive_number_is_refused_at_start(rate):
    with pytest.raises(ValueError, match="positive number of requests per second"):
        Limit("API key", "api_key", rate, MemoryWindows())


def test_memory_keeps_only_the_current_windows_buckets():
    """Callers that invent webhook ids cannot grow the process's memory past one window."""
    windows = MemoryWindows()
    for index in range(1000):
        windows.hit(f"w{index}", 10)
    assert windows.hit("w-new", 11) == 1
    assert len(windows._hits) == 1


def test_ids_no_webhook_can_have_share_one_allowance():
    limits = RateLimits(per_key=0, per_webhook=2)
    limits.per_webhook.clock = Clock(1000.5)  # all in one window
    limits.check_webhook("DA0QzZ37LsGJjLDr3zFn8J1KuDQW-ea1")
    limits.check_webhook("odd\x00id")
    limits.check_webhook("x" * 65)
    with pytest.raises(TooManyRequestsError):
        limits.check_webhook("another/odd id")
    limits.check_webhook("DA0QzZ37LsGJjLDr3zFn8J1KuDQW-ea1")  # a real-looking id keeps its own


def test_off_means_no_check_at_all():
    limits = RateLimits(per_key=0, per_webhook=0)
    assert limits.per_key is None and limits.per_webhook is None
    for _ in range(100):
        limits.check_key(1)
        limits.check_webhook("x")


def test_the_store_follows_the_database(app):
    with app.app_context():
        limits = RateLimits(per_key=5, per_webhook=5, engine=db.engine)
        expected = DatabaseWindows if db.engine.dialect.name == "postgresql" else FileWindows
        assert isinstance(limits.per_key.windows, expected)
        assert isinstance(limits.per_webhook.windows, expected)
        limits.close()


def test_an_in_memory_sqlite_database_counts_in_the_process():
    limits = RateLimits(per_key=5, per_webhook=0, engine=create_engine("sqlite://"))
    assert isinstance(limits.per_key.windows, MemoryWindows)


def test_two_processes_count_against_one_limit_in_the_file(tmp_path):
    """The file's flock holds between processes: a real second process hits first."""
    path = str(tmp_path / "db.sqlite-limits")
    clock = Clock(7000.5)
    here = Limit("webhook", "webhook", 5, FileWindows(path), clock)
    other = subprocess.run([sys.executable, "-c", (
        "import sys; from engine.rate_limits import FileWindows; w = FileWindows(sys.argv[1]); "
        "print(sum(w.hit('w-shared', 7001) <= 5 for _ in range(4)))"), path],
        cwd=ROOT, capture_output=True, text=True, timeout=60, check=True)
    assert other.stdout.split() == ["4"]
    assert accepted(here, "w-shared", 5) == 1  # 4 of the 5 were taken by the other process
    assert accepted(here, "w-other", 5) == 5
    clock.now = 7001.0  # the next window starts again for both
    assert accepted(here, "w-shared", 7) == 5
    assert FileWindows(path).hit("w-shared", 7002) == 8  # another opening sees the 7 hits (refused ones count)


def test_a_slot_of_a_past_window_is_taken_again_and_the_buckets_behind_it_are_still_found(tmp_path):
    class Tiny(FileWindows):
        SLOTS, PROBES = 4, 4

    windows = Tiny(str(tmp_path / "tiny-limits"))
    buckets = [f"b{index}" for index in range(4)]
    for bucket in buckets:
        assert windows.hit(bucket, 100) == 1
    assert [windows.hit(bucket, 100) for bucket in buckets] == [2, 2, 2, 2]  # every slot holds one
    assert windows.hit("b-new", 101) == 1  # a new window: it takes a slot of the past one
    assert [windows.hit(bucket, 101) for bucket in buckets] == [1, 1, 1, 1]  # not mistaken for b-new
    assert windows.hit("b-new", 101) == 2


def test_more_buckets_than_slots_in_one_window_count_per_process_with_a_warning(tmp_path, caplog):
    class Tiny(FileWindows):
        SLOTS, PROBES = 2, 2

    windows = Tiny(str(tmp_path / "full-limits"))
    assert [windows.hit(bucket, 100) for bucket in ("a", "b", "c", "c")] == [1, 1, 1, 2]
    assert "more than 2 buckets in one window" in caplog.text
    assert windows.hit("a", 100) == 2  # the file's buckets still count there


@pytest.fixture(scope="module")
def postgres_engine(tmp_path_factory):
    """The shared table of PostgreSQL."""
    url = make_database_url("postgresql", tmp_path_factory)
    application = create_app({"database_url": url, "workers": 0})
    with application.app_context():
        yield db.engine
        db.session.remove()
        db.engine.dispose()
    drop_postgres_database(url)


@pytest.fixture
def windows(postgres_engine):
    """DatabaseWindows(clock) as separate web processes have them; their connections closed after."""
    made = []

    def make(clock):
        made.append(DatabaseWindows(postgres_engine, clock))
        return made[-1]

    yield make
    for one in made:
        one.close()


def test_two_processes_count_against_one_limit_on_postgresql(windows):
    clock = Clock(2000.5)
    first = Limit("API key", "api_key", 4, windows(clock), clock)
    second = Limit("API key", "api_key", 4, windows(clock), clock)
    assert accepted(first, "k-shared", 3) + accepted(second, "k-shared", 3) == 4
    clock.now = 2001.0
    assert accepted(second, "k-shared", 6) == 4


def test_a_process_whose_clock_is_behind_counts_into_the_newer_window(windows):
    ahead, behind = Clock(3001.2), Clock(3000.9)
    limit_ahead = Limit("API key", "api_key", 2, windows(ahead), ahead)
    limit_behind = Limit("API key", "api_key", 2, windows(behind), behind)
    assert accepted(limit_ahead, "k-skew", 1) == 1
    assert accepted(limit_behind, "k-skew", 3) == 1  # not a fresh window of its own
    row = db.session.execute(select(RateLimitWindow).where(RateLimitWindow.bucket == "k-skew")).scalar_one()
    assert (row.window_end, row.hits) == (3002, 4)
    db.session.rollback()


def test_old_buckets_are_purged_by_the_next_hit_a_minute_later(windows):
    clock = Clock(5000.0)
    counting = windows(clock)
    for index in range(20):
        counting.hit(f"w-purge-{index}", 5001)
    clock.now = 5100.0
    counting.hit("w-purge-new", 5101)
    left = db.session.execute(select(RateLimitWindow.bucket)
                              .where(RateLimitWindow.bucket.like("w-purge-%"))).scalars().all()
    db.session.rollback()
    assert left == ["w-purge-new"]
