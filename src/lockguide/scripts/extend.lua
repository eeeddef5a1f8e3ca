-- Compare-and-pexpire: give the lock a fresh TTL only if it still
-- holds the caller's value.
--   KEYS[1]  the lock key
--   ARGV[1]  the value this holder wrote when it acquired the lock
--   ARGV[2]  the new time to live, in milliseconds
-- Returns 1 if the TTL was reset,
--         0 if the key was absent or held by someone else.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return 0
end
return redis.call("PEXPIRE", KEYS[1], ARGV[2])
