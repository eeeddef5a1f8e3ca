# PostgreSQL's own lock, held by the transaction that does the writes.
import psycopg

DSN = "host=127.0.0.1 dbname=app user=app"


def credit(account_id: int, cents: int) -> None:
    with psycopg.connect(DSN) as db, db.transaction():
        db.execute("SELECT pg_advisory_xact_lock(hashtext('accounts'), %s)", (account_id,))
        db.execute("UPDATE accounts SET balance = balance + %s WHERE id = %s", (cents, account_id))
    # COMMIT or ROLLBACK releases the lock; a lost connection rolls back writes and lock
