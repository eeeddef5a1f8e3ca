-- Fenced acquire: take the lock and draw the next fencing token in one atomic step.
-- KEYS[1] = the lock key
-- KEYS[2] = the token counter for this resource (never expires)
-- ARGV[1] = this holder's random value
-- ARGV[2] = the time to live, in milliseconds
-- Returns the new token (1, 2, 3, ...) when the lock was taken, 0 when it is held.
-- Nobody can get a token without the lock, or the lock without a token.
if not redis.call("SET", KEYS[1], ARGV[1], "NX", "PX", ARGV[2]) then
    return 0
end
return redis.call("INCR", KEYS[2])
