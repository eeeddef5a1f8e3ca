# Fixed: value and next version are written together, so the version moves.
import redis

from lockguide import VersionedValue

r = redis.Redis()
profile = VersionedValue(r, "profile:42")
profile.compare_and_set(0, "name=Ada")

version = profile.read().version
for edit in ("v2", "v3", "v4"):
    result = profile.compare_and_set(version, edit)
    print(f"update with version {version}:", result.accepted)
    #> update with version 1: True
    #> update with version 2: True
    #> update with version 3: True
    version = result.version

# Both read the same version: the first wins, the second is refused.
seen = profile.read().version
alice = profile.compare_and_set(seen, "Alice's edit").accepted
bob = profile.compare_and_set(seen, "Bob's edit").accepted
print("Alice:", alice, "Bob:", bob, "->", profile.read().value)
#> Alice: True Bob: False -> Alice's edit
