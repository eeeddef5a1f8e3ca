# Two schedulers campaign for one role: one leads; when it resigns, the other takes over.
import redis

from lockguide import Leader

r = redis.Redis()
timing = {"lease_ms": 3_000, "renew_deadline_ms": 2_000, "retry_period_ms": 500}
a = Leader(r, "lock:leader:cron", name="scheduler-a", **timing)
b = Leader(r, "lock:leader:cron", name="scheduler-b", **timing)

with a:  # campaigns until elected, renews while the block runs, resigns on the way out
    print("b elected too:", b.campaign(blocking=False))
    #> b elected too: False
    term = b.holder()  # anyone may read who leads, since when, with which token
    print(term.name.endswith(":scheduler-a"), term.token == a.token)
    #> True True
    a.check()  # before each tick: raises RenewalFailed once the term is lost

print("b elected now:", b.campaign(blocking=False), "with a higher token:", b.token > term.token)
#> b elected now: True with a higher token: True
b.resign()
