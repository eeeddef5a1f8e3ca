-- Release by compare-and-delete, handing the lock to the oldest waiter whose
-- place is still alive: the key then holds that waiter's value, with the
-- waiter's own lease, and a wake-up (the fencing token, or 1) is pushed to
-- the list the waiter blocks on. The wake-up is the grant: the waiter needs
-- no further request. A waiter that was not listening finds the key holding
-- its value at its next try (take.lua). The key is written last: if a Cluster
-- slot being migrated refuses a key on the way, the lock is still ours, and
-- the plain compare-and-delete (release.lua) releases it.
--   KEYS[1]  the lock key
--   ARGV[1]  the value this holder wrote when it acquired the lock
--   ARGV[2]  how long an unheard wake-up is kept, in ms (a place's lease)
--   ARGV[3]  the prefix of the lock's other keys (as in take.lua)
--   ARGV[4]  how long a note that this value was released is kept, in ms
--   ARGV[5]  "1" when a waiter gives up: it leaves its place first
-- Returns 1 if the key was ours (now gone or handed on), or if this value was
--           released already by a request whose reply was lost;
--         0 if it was absent or held by someone else.
if ARGV[5] == "1" then
    redis.call("DEL", ARGV[3] .. "waiter:" .. ARGV[1])
end
local note = ARGV[3] .. "released:" .. ARGV[1]
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return redis.call("EXISTS", note)
end
redis.call("SET", note, "1", "PX", ARGV[4])
for _ = 1, 16 do
    local waiter = redis.call("LPOP", ARGV[3] .. "line")
    if not waiter then
        break
    end
    -- A waiter whose place has expired stopped asking (it crashed or gave up).
    local needs = redis.call("GETDEL", ARGV[3] .. "waiter:" .. waiter)
    if needs then
        local lease, counter = string.match(needs, "^(%d+) (.*)$")
        local token = "1"
        if counter ~= "" then
            token = redis.call("INCR", counter)
            redis.call("SET", ARGV[3] .. "token:" .. waiter, token, "PX", ARGV[2])
        end
        local wake = ARGV[3] .. "wake:" .. waiter
        redis.call("RPUSH", wake, token)
        redis.call("PEXPIRE", wake, ARGV[2])
        redis.call("SET", KEYS[1], waiter, "PX", lease)
        return 1
    end
end
return redis.call("DEL", KEYS[1])
