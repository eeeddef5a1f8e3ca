-- A waiter's try: take the lock if it is free, or if a release handed it to
-- this waiter's value (hand_off.lua) while the waiter was not listening;
-- otherwise keep the waiter's place in line.
--   KEYS[1]  the lock key
--   KEYS[2]  (FencedLock only) the fencing token counter
--   ARGV[1]  the waiter's value
--   ARGV[2]  the lease to take, in ms
--   ARGV[3]  how long the waiter's place lasts without a new try, in ms;
--            "0": no place (a Cluster slot being migrated refused the line)
--   ARGV[4]  the prefix of the lock's other keys (the lock key's hash tag):
--            the line (a list of waiters' values, oldest first), the places,
--            the wake-up lists and the tokens of keys handed over
-- Returns 1 (with KEYS[2]: the fencing token) if the waiter holds the lock
-- now, 0 if it waits on.
local held = redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2], "GET")
if not held then
    if KEYS[2] then
        return redis.call("INCR", KEYS[2])
    end
    return 1
end
if held == ARGV[1] then
    redis.call("PEXPIRE", KEYS[1], ARGV[2])
    if KEYS[2] then
        return tonumber(redis.call("GET", ARGV[4] .. "token:" .. ARGV[1]) or "1")
    end
    return 1
end
if ARGV[3] == "0" then
    return 0
end
-- Held by another: renew this waiter's place (its lease), or join the line.
-- The place holds what a hand-over needs: the waiter's lease and its token
-- counter, if any.
local place = ARGV[4] .. "waiter:" .. ARGV[1]
local needs = ARGV[2] .. " " .. (KEYS[2] or "")
if not redis.call("SET", place, needs, "PX", ARGV[3], "GET") then
    redis.call("RPUSH", ARGV[4] .. "line", ARGV[1])
end
return 0
