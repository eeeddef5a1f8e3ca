# The lock lives in Redis, the data in SQL: the token links them.
# The resource's check is a conditional UPDATE: WHERE fence_token < :token.
import sqlite3

import redis

from lockguide import FencedLock, SqlFencedStore, StaleToken

r = redis.Redis()
db = sqlite3.connect(":memory:")  # PostgreSQL works the same (a psycopg connection)

ledger = SqlFencedStore(db, "ledger")
ledger.setup()  # CREATE TABLE IF NOT EXISTS fenced_resource (..., fence_token BIGINT NOT NULL)

with FencedLock(r, "lock:ledger", ttl_ms=10_000) as a:
    a_token = a.token  # A's write is sent, and held up on the way
with FencedLock(r, "lock:ledger", ttl_ms=10_000) as b:
    print(ledger.write(b.token, "balance 250"))
    #> WriteResult(accepted=True, token=2, highest=2)

try:
    ledger.write(a_token, "balance 100")  # A's write arrives late
except StaleToken as refused:
    print(f"A's write refused: token {refused.token} < {refused.highest}")
    #> A's write refused: token 1 < 2

print(db.execute("SELECT name, value, fence_token FROM fenced_resource").fetchall())
#> [('ledger', 'balance 250', 2)]
