-- Compare-and-set on a version: write the value and the next version together,
-- only if the version is still the one the caller read.
-- KEYS[1] = a hash holding "value" and "version" (a missing hash is version 0)
-- ARGV[1] = the version the caller read
-- ARGV[2] = the new value
-- Returns {1, new version} when written, {0, current version} when refused.
local current = tonumber(redis.call("HGET", KEYS[1], "version") or "0")
if current ~= tonumber(ARGV[1]) then
    return {0, current}
end
local next_version = current + 1
redis.call("HSET", KEYS[1], "value", ARGV[2], "version", next_version)
return {1, next_version}
