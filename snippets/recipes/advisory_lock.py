# PostgreSQL's own lock, held by the transaction that reads, computes and writes.
import psycopg

DSN = "host=127.0.0.1 dbname=app user=app"


def credit(account_id: int, cents: int) -> None:
    with psycopg.connect(DSN) as db, db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(hashtext('accounts'), %s)", (account_id,))
        (balance,) = db.execute(
            "SELECT balance FROM accounts WHERE id = %s", (account_id,)
        ).fetchone()  # without the lock, two credits could read the same balance
        new_balance = balance + cents  # computed here: your fees, limits, rounding
        db.execute("UPDATE accounts SET balance = %s WHERE id = %s", (new_balance, account_id))
    # COMMIT or ROLLBACK releases the lock; a lost connection rolls back writes and lock
