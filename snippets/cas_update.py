# Compare-and-set on a version: the update is accepted, then a stale one refused.
import redis

from lockguide import VersionedValue

r = redis.Redis()
profile = VersionedValue(r, "profile:42")
profile.compare_and_set(0, "name=Ada")  # the first write: version 0 -> 1

alice = profile.read()  # Alice and Bob both read version 1
bob = profile.read()
print(alice)
#> Versioned(value='name=Ada', version=1)

print("Alice:", profile.compare_and_set(alice.version, "name=Ada Lovelace"))
#> Alice: CasResult(accepted=True, version=2)
print("Bob:  ", profile.compare_and_set(bob.version, "name=Ada King"))
#> Bob:   CasResult(accepted=False, version=2)

# Bob reads again, sees Alice's change, and decides on the new state:
bob = profile.read()
print("Bob again:", profile.compare_and_set(bob.version, bob.value + ", Countess"))
#> Bob again: CasResult(accepted=True, version=3)
print(profile.read())
#> Versioned(value='name=Ada Lovelace, Countess', version=3)
