# Charge an order once, however often the job runs: the idempotency key comes from the order.
import psycopg

DSN = "host=127.0.0.1 dbname=shop user=shop"


def pay(order_id: int, cents: int) -> str:
    """The provider's charge id, the same on every call for this order."""
    key = f"order-{order_id}-payment"  # never random: every retry must send the same key
    with psycopg.connect(DSN) as db, db.transaction():
        (charge_id,) = db.execute(
            "SELECT charge_id FROM orders WHERE id = %s FOR UPDATE", (order_id,)
        ).fetchone()  # the row lock makes a second worker wait for our COMMIT
        if charge_id is not None:
            return str(charge_id)  # recorded by an earlier run
        charge_id = charge(cents, idempotency_key=key)  # a repeat gets the first charge back
        db.execute(
            "UPDATE orders SET charge_id = %s, status = 'paid' WHERE id = %s",
            (charge_id, order_id),
        )  # recorded in the transaction that read the order: both commit, or neither
    return str(charge_id)  # a crash before COMMIT: the next run charges with the same key


def charge(cents: int, idempotency_key: str) -> str: ...
