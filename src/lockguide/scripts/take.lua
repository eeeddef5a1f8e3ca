-- Take the lock for a waiter: when the key is free and no live waiter is
-- ahead of this one, or when a release handed the key to this waiter's
-- value (hand_off.lua). Otherwise keep the waiter's place in line.
--   KEYS[1]  the lock key
--   KEYS[2]  the line: waiters' values, scored by when they joined (ms)
--   KEYS[3]  the places' leases: waiters' values, scored by expiry (ms)
--   KEYS[4]  (FencedLock only) the fencing token counter
--   ARGV[1]  the waiter's value
--   ARGV[2]  the lease to take, in ms
--   ARGV[3]  how long a place lasts without a new try, in ms
-- Returns 1 (the token, with KEYS[4]) if taken, 0 if the waiter waits on.
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
-- A waiter that stopped asking (crashed, gave up) loses its place.
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
local held = redis.call("GET", KEYS[1])
local first = false
if not held then
    -- The oldest waiter still alive; dead ones are dropped on the way.
    for _ = 1, 16 do
        first = redis.call("ZRANGE", KEYS[2], 0, 0)[1]
        if not first or redis.call("ZSCORE", KEYS[3], first) then
            break
        end
        redis.call("ZREM", KEYS[2], first)
        first = false
    end
end
if held == ARGV[1] or (not held and (not first or first == ARGV[1])) then
    redis.call("SET", KEYS[1], ARGV[1], "PX", ARGV[2])
    redis.call("ZREM", KEYS[2], ARGV[1])
    redis.call("ZREM", KEYS[3], ARGV[1])
    if KEYS[4] then
        return redis.call("INCR", KEYS[4])
    end
    return 1
end
-- Join the line (a waiter keeps the place it had) and renew the place's lease.
redis.call("ZADD", KEYS[2], "NX", now, ARGV[1])
redis.call("ZADD", KEYS[3], now + ARGV[3], ARGV[1])
redis.call("PEXPIRE", KEYS[2], ARGV[3])
redis.call("PEXPIRE", KEYS[3], ARGV[3])
return 0
