# Broken: after a failed attempt, release only the masters that said yes.
# Master 4 stored the key, but its reply was lost: its copy stays for the TTL.
import secrets
from importlib.resources import files

import redis

masters = [redis.Redis(port=port) for port in range(6379, 6384)]
KEY = "lock:ledger"
release = files("lockguide.scripts").joinpath("release.lua").read_text()

for m in masters[:2]:
    m.set(KEY, "another client", px=30_000)  # someone holds masters 0 and 1

mine = secrets.token_hex(20)
replies = [m.set(KEY, mine, nx=True, px=30_000) for m in masters]  # in turn, for brevity
replies[4] = None  # master 4 stored the key; the reply was lost on the way back
granted = sum(1 for r in replies if r)
print("granted:", granted, "of 5: no majority")
#> granted: 2 of 5: no majority

for m, reply in zip(masters, replies, strict=True):
    if reply:  # only the masters that said yes
        m.eval(release, 1, KEY, mine)

print("master 4 still holds our abandoned key:", masters[4].get(KEY) == mine.encode())
#> master 4 still holds our abandoned key: True
print("for another 29 s or more:", masters[4].pttl(KEY) > 29_000)
#> for another 29 s or more: True
