-- Compare-and-delete: remove the lock only if it still holds
-- the caller's value.
--   KEYS[1]  the lock key
--   ARGV[1]  the value this holder wrote when it acquired the lock
-- Returns 1 if the key was ours and is now gone,
--         0 if it was absent or held by someone else.
if redis.call("GET", KEYS[1]) ~= ARGV[1] then
    return 0
end
return redis.call("DEL", KEYS[1])
