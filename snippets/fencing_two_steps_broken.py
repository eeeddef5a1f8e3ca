# Broken: the token drawn in a second command, after the lock. A pause between
# the two hands the stale holder the *higher* token.
import secrets
import time

import redis

r = redis.Redis()

a_value = secrets.token_hex(20)
print("A's SET:", r.set("lock:ledger", a_value, nx=True, px=100))
#> A's SET: True

time.sleep(0.15)  # A pauses between its SET and its INCR; its lease runs out

b_value = secrets.token_hex(20)
print("B's SET:", r.set("lock:ledger", b_value, nx=True, px=10_000))
#> B's SET: True
b_token = r.incr("{lock:ledger}:fence")

a_token = r.incr("{lock:ledger}:fence")  # A wakes up and draws its token
print(f"tokens: A={a_token}, B={b_token}")
#> tokens: A=2, B=1
print("the lock is B's, but the stale holder has the higher token:", a_token > b_token)
#> the lock is B's, but the stale holder has the higher token: True
