# The lock lives in Redis, the data in SQL: the token links them.
# The resource's check is a conditional UPDATE: WHERE fence_token < :token.
import sqlite3
import time

import redis

from lockguide import FencedLock, SqlFencedStore, StaleToken

r = redis.Redis()
db = sqlite3.connect(":memory:")  # PostgreSQL works the same (a psycopg connection)

ledger = SqlFencedStore(db, "ledger")
ledger.setup()  # CREATE TABLE IF NOT EXISTS fenced_resource (..., fence_token BIGINT)

a = FencedLock(r, "lock:ledger", ttl_ms=100)
a.acquire(blocking=False)
time.sleep(0.15)  # A pauses past its lease
b = FencedLock(r, "lock:ledger", ttl_ms=10_000)
b.acquire(blocking=False)

print(ledger.write(b.token, "balance 250"))
#> WriteResult(accepted=True, token=2, highest=2)
try:
    ledger.write(a.token, "balance 100")
except StaleToken as refused:
    print(f"A's write refused: token {refused.token} < {refused.highest}")
    #> A's write refused: token 1 < 2

print(db.execute("SELECT name, value, fence_token FROM fenced_resource").fetchall())
#> [('ledger', 'balance 250', 2)]
