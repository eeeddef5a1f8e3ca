# cron: 0 2 * * *  python nightly_report.py  (one run at a time, plain redis-py)
import secrets
import sys

import redis

KEY = "lock:nightly-report"
# Delete the key only if it still holds our value: never another run's lock.
RELEASE = "if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end"

r = redis.Redis(socket_timeout=2)
release = r.register_script(RELEASE)  # EVALSHA, loaded again if the server forgot it


def main() -> int:
    value = secrets.token_hex(20)  # unguessable, new for every run
    if not r.set(KEY, value, nx=True, px=15 * 60_000):  # the lease: 15 min, above the worst run
        return 0  # another run holds it (or a retried SET found our own key): skip tonight
    try:
        build_report()
    finally:
        released = release(keys=[KEY], args=[value])
    return 0 if released else 3  # 3: the lease ran out during the run; it may have overlapped


def build_report() -> None: ...


if __name__ == "__main__":
    sys.exit(main())
