# Loyalty points for a paid order: credited once, however often the event arrives. No lock.
import redis

r = redis.Redis()
# The idempotency key and the effect in one script: a redelivery finds the key and does nothing.
credit_once = r.register_script(
    "if redis.call('SET', KEYS[1], 1, 'NX', 'EX', ARGV[2]) then"
    " return redis.call('INCRBY', KEYS[2], ARGV[1]) end"
)


def on_order_paid(order_id: str, customer: str, points: int) -> bool:
    """True if this delivery credited the points, False for a repeat."""
    done = credit_once(
        keys=[f"points:{{{customer}}}:order:{order_id}", f"points:{{{customer}}}"],
        args=[points, 90 * 86_400],  # remember orders for longer than any redelivery
    )
    return done is not None
