# Fixed: a failed attempt releases on every master, whatever it answered.
# Compare-and-delete makes that safe: it only ever deletes our own value.
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

deleted = [m.eval(release, 1, KEY, mine) for m in masters]  # every master
print("deleted on masters:", [i for i, d in enumerate(deleted) if d])
#> deleted on masters: [2, 3, 4]
print("the other client's keys untouched:", [m.get(KEY) for m in masters[:2]])
#> the other client's keys untouched: [b'another client', b'another client']
