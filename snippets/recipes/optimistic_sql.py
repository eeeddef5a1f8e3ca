# Apply a payment to a ledger row: no lock, a version column; a lost race reads again.
import psycopg

DSN = "host=127.0.0.1 dbname=ledger user=ledger"
ATTEMPTS = 5  # bounded: under heavy contention, fail loudly rather than spin


class Conflict(RuntimeError):
    """Other writers changed the row on every attempt."""


def apply_payment(account_id: int, cents: int) -> int:
    """The new balance. Schema: accounts (id, balance, version BIGINT NOT NULL DEFAULT 0)."""
    with psycopg.connect(DSN, autocommit=True) as db:  # each statement commits at once
        for _ in range(ATTEMPTS):
            balance, version = db.execute(
                "SELECT balance, version FROM accounts WHERE id = %s", (account_id,)
            ).fetchone()
            new_balance = settle(balance, cents)  # your rules: fees, limits, rounding
            changed = db.execute(
                "UPDATE accounts SET balance = %s, version = version + 1"
                " WHERE id = %s AND version = %s",  # only if nobody wrote since our read
                (new_balance, account_id, version),
            ).rowcount
            if changed == 1:
                return new_balance
    raise Conflict(f"account {account_id}: {ATTEMPTS} attempts lost to other writers")


def settle(balance: int, cents: int) -> int: ...
