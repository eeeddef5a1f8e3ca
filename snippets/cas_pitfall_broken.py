# Broken: the script compares the version but never writes a new one.
import redis

r = redis.Redis()
compared_never_written = r.register_script("""
if redis.call('HGET', KEYS[1], 'version') == ARGV[1] then
  redis.call('HSET', KEYS[1], 'value', ARGV[2])
  return 1
end
return 0
""")

r.hset("profile:42", mapping={"value": "name=Ada", "version": "1"})

# A caller that counts its own versions: it read 1, so after writing it holds 2.
print("update with version 1:", compared_never_written(keys=["profile:42"], args=["1", "v2"]))
#> update with version 1: 1
for _ in range(3):
    result = compared_never_written(keys=["profile:42"], args=["2", "v3"])
    print("update with version 2:", result)
    #> update with version 2: 0
    #> update with version 2: 0
    #> update with version 2: 0

# Callers that re-read are never refused: both read version 1, both win.
alice = compared_never_written(keys=["profile:42"], args=["1", "Alice's edit"])
bob = compared_never_written(keys=["profile:42"], args=["1", "Bob's edit"])
print("Alice:", alice, "Bob:", bob, "->", r.hget("profile:42", "value").decode())
#> Alice: 1 Bob: 1 -> Bob's edit
