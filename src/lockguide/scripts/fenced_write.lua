-- Fenced write: store a value only if its token is newer than every token accepted so far.
-- KEYS[1] = the resource, a hash holding "value" and "token" (the highest accepted)
-- ARGV[1] = the writer's fencing token
-- ARGV[2] = the value to store
-- Returns {1, token} when the write was accepted,
--         {0, highest} when it was refused because a token >= it was already accepted.
local highest = tonumber(redis.call("HGET", KEYS[1], "token") or "0")
local token = tonumber(ARGV[1])
if token <= highest then
    return {0, highest}
end
redis.call("HSET", KEYS[1], "value", ARGV[2], "token", ARGV[1])
return {1, token}
