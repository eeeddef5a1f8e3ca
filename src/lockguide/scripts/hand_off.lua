-- Release by compare-and-delete, handing the key to the oldest live waiter:
-- the key then holds that waiter's value for a short window, and a wake-up
-- is pushed to the list it blocks on. Nobody else can take the key in that
-- window; if the waiter does not claim it (take.lua), the key expires.
--   KEYS[1]  the lock key
--   KEYS[2]  the line (as in take.lua)
--   KEYS[3]  the places' leases (as in take.lua)
--   ARGV[1]  the value this holder wrote when it acquired the lock
--   ARGV[2]  the hand-off window, in ms
--   ARGV[3]  the prefix of this lock's other keys (the waiters' wake-up lists,
--            the notes of releases done): the lock key's hash tag, for a Cluster
--   ARGV[4]  how long a note that this value was released is kept, in ms
-- Returns 1 if the key was ours (now gone or handed on), or if this value was
--           released already, by a request whose reply was lost;
--         0 if it was absent or held by someone else.
redis.call("ZREM", KEYS[2], ARGV[1])
redis.call("ZREM", KEYS[3], ARGV[1])
local note = ARGV[3] .. "released:" .. ARGV[1]
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return redis.call("EXISTS", note)
end
redis.call("SET", note, "1", "PX", ARGV[4])
local t = redis.call("TIME")
local now = t[1] * 1000 + math.floor(t[2] / 1000)
redis.call("ZREMRANGEBYSCORE", KEYS[3], "-inf", now)
for _ = 1, 16 do
    local first = redis.call("ZRANGE", KEYS[2], 0, 0)[1]
    if not first then
        break
    end
    if redis.call("ZSCORE", KEYS[3], first) then
        redis.call("SET", KEYS[1], first, "PX", ARGV[2])
        local wake = ARGV[3] .. "wake:" .. first
        redis.call("RPUSH", wake, "1")
        redis.call("PEXPIRE", wake, ARGV[2])
        return 1
    end
    redis.call("ZREM", KEYS[2], first)
end
return redis.call("DEL", KEYS[1])
