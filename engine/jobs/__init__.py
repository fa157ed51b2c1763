"""The durable job queue (``queue``), the kinds of job (``kinds``), the retry policy (``retry``),
who to wake when jobs are ready (``wakers``), and the workers that run jobs: threads (``worker``)
or supervised processes (``processes``).

The queue's API is re-exported here: ``from engine import jobs``; ``jobs.enqueue(uow, ...)``.
"""
from engine.jobs.queue import (HELD_UNTIL, ClaimedJob, KindFilter, claim, claim_or_next, enqueue, extend_lease,
                               finish, hold, lock, release, release_unfinished, requeue_held)
from engine.store.unit_of_work import Then

__all__ = ["HELD_UNTIL", "ClaimedJob", "KindFilter", "Then", "claim", "claim_or_next", "enqueue", "extend_lease",
           "finish", "hold", "lock", "release", "release_unfinished", "requeue_held"]
